# mlerl sandbox bootstrap. Run by the Go runner as `python3 -s -c <this> MODE CONFIG`:
#   cold CONFIG   set up the sandbox in this process, then run the script once
#   serve CONFIG  warm worker: pre-import modules, then fork one sandboxed child
#                 per request received on fd 3 (a SOCK_SEQPACKET unix socket)
#   probe CONFIG  set up the sandbox and report which isolation worked
# A child reports its setup on a status pipe: b"R" (ready, user code follows)
# or b"E<message>" (setup failed, exit 125). User code cannot forge the status
# because it only runs after the status pipe is closed. Before the status, a
# child hands the runner, on its control socket (a SOCK_SEQPACKET socket the
# runner made for this run), its pid and the file descriptors only the runner
# may keep: the root of the run's own workspace tmpfs and the listening
# sockets of the markers (see guard); then it closes them, and the socket.
import sys

if sys.path and sys.path[0] in ("", "."):
    del sys.path[0]  # never import from the working directory before the sandbox is set up

import json  # noqa: E402
import os  # noqa: E402
import signal  # noqa: E402

MARK = b"# mlerl:inserted"
CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 1, 2, 4, 8, 32
MS_BIND, MS_REC, MS_PRIVATE = 4096, 16384, 1 << 18
MNT_DETACH = 2
O_PATH = 0o10000000
PR_SET_NO_NEW_PRIVS, PR_SET_CHILD_SUBREAPER, PR_SET_DUMPABLE = 38, 36, 4
GUARD_EXIT = 111  # the exit status of a guarded run the guard stopped
PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "arm64": 41, "riscv64": 41, "ppc64le": 203, "s390x": 217}
RO_DIRS = ["/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt"]
DEVICES = ["null", "zero", "full", "random", "urandom"]

_libc = None


def libc():
    global _libc
    if _libc is None:
        import ctypes
        _libc = ctypes.CDLL(None, use_errno=True)
    return _libc


def _check(ret, what):
    if ret != 0:
        import ctypes
        e = ctypes.get_errno()
        raise OSError(e, "%s: %s" % (what, os.strerror(e)))


def mount(src, dst, fstype, flags, data):
    enc = lambda s: None if s is None else s.encode()
    _check(libc().mount(enc(src), enc(dst), enc(fstype), flags, enc(data)), "mount %s on %s" % (src or fstype, dst))


def bind(src, dst, ro, strict):
    if os.path.isdir(src):
        os.makedirs(dst, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        open(dst, "a").close()
    mount(src, dst, None, MS_BIND | MS_REC, None)
    flags = MS_REMOUNT | MS_BIND | MS_NOSUID | (MS_RDONLY if ro else 0)
    if not src.startswith("/dev/"):
        flags |= MS_NODEV
    try:
        mount(None, dst, None, flags, None)
    except OSError:
        # In a user namespace, flags locked by the parent cannot be cleared;
        # the files stay protected by their owner's permissions.
        if strict:
            raise


def loopback_up():
    """A new network namespace has only a loopback interface, down: bring it
    up so that scripts can still talk to themselves (multiprocessing
    managers, local servers). Nothing else is reachable: no host services,
    no cloud metadata server, no internet."""
    import fcntl
    import socket
    import struct
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        fcntl.ioctl(s, 0x8914, struct.pack("16sH14x", b"lo", 0x1 | 0x8 | 0x40))  # SIOCSIFFLAGS: UP|LOOPBACK|RUNNING
    finally:
        s.close()


def overlay_workspace(cfg, root, mode):
    """Mounts the workspace at its own path in the new root as an overlay: the
    workspace on the host is the read-only lower layer, and everything the run
    writes goes to the upper layer, on a tmpfs of the run's own of size
    ws_bytes and ws_inodes inodes (the kernel refuses more: ENOSPC), charged
    to the run's memory cgroup. The tmpfs is mounted on the empty folder
    cfg["scratch"] of the old root, which leaves the namespace with the old
    root (one detach for both: each costs an RCU grace period, milliseconds):
    the script never sees it. The returned descriptor of its root, handed to
    the runner, keeps it alive after the run so that the runner can copy what
    the run left back to the workspace (space.go)."""
    d, ws, scratch = cfg["dir"], cfg["ws"], cfg["scratch"]
    mount("tmpfs", scratch, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0700,size=%d,nr_inodes=%d" % (ws["bytes"], ws["inodes"]))
    st = os.stat(d)
    for sub in ("upper", "work"):
        os.mkdir(scratch + "/" + sub, 0o700)
    # The upper folder is the workspace folder the script sees: its owner
    # and mode are the workspace's.
    if mode == "root":
        os.chown(scratch + "/upper", st.st_uid, st.st_gid)
    os.chmod(scratch + "/upper", st.st_mode & 0o7777)
    os.makedirs(root + d, exist_ok=True)
    # Layers by descriptor: no path in the options, so no escaping and no
    # length limit on the workspace's path.
    fds = [os.open(x, O_PATH | os.O_DIRECTORY | os.O_CLOEXEC) for x in (d, scratch + "/upper", scratch + "/work")]
    try:
        opts = "lowerdir=/proc/self/fd/%d,upperdir=/proc/self/fd/%d,workdir=/proc/self/fd/%d" % tuple(fds)
        # No redirects (renaming a folder that was in the workspace before
        # the run fails with EXDEV, which shutil.move copes with), no index,
        # no metadata-only copies: the upper layer holds whole files,
        # whiteouts and opaque folders only, all the runner reads.
        opts += ",userxattr" if mode == "userns" else ",redirect_dir=off,index=off,metacopy=off,xino=off"
        try:
            mount("overlay", root + d, "overlay", MS_NOSUID | MS_NODEV, opts)
        except OSError as e:
            raise OSError(e.errno, "the workspace %s cannot be the lower layer of an overlay (%s): keep workspaces (env.work_dir) on a local file system such as ext4, xfs, btrfs or tmpfs" % (d, e.strerror))
    finally:
        for fd in fds:
            os.close(fd)
    return os.open(scratch, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)


def drop_capabilities():
    """Drops every capability the process has in its user namespace (it made
    the namespace, so it has them all there): without them the script cannot
    unmount or remount what isolate set up, nor mount a tmpfs of its own."""
    import ctypes

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]

    _check(libc().capset(ctypes.byref(Header(0x20080522, 0)), (Data * 2)()), "drop capabilities")


def isolate(cfg):
    """Give the process a private filesystem view: system directories read-only,
    the workspace read-write at its own path (an overlay on a tmpfs of its own
    when cfg has "ws"), a fresh /tmp; nothing else. Returns the workspace
    tmpfs's descriptor, or -1."""
    mode = cfg["isolation"]
    uid, gid = os.getuid(), os.getgid()
    if mode == "userns":
        _check(libc().unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET), "unshare user+mount+network namespace")
        with open("/proc/self/setgroups", "w") as f:
            f.write("deny")
        with open("/proc/self/uid_map", "w") as f:
            f.write("%d %d 1" % (uid, uid))
        with open("/proc/self/gid_map", "w") as f:
            f.write("%d %d 1" % (gid, gid))
        loopback_up()
    else:
        _check(libc().unshare(CLONE_NEWNS | CLONE_NEWNET), "unshare mount+network namespace")
    loopback_up()
    strict = mode == "root"
    mount(None, "/", None, MS_REC | MS_PRIVATE, None)
    root = cfg["root"]
    mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=16m")
    ro = list(RO_DIRS)
    for p in [sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.realpath(sys.executable))] + sys.path:
        if p and os.path.isabs(p) and os.path.isdir(p) and not any(p == d or p.startswith(d + "/") for d in ro):
            ro.append(os.path.realpath(p))
    ro.sort(key=len)
    done = []
    for d in ro:
        if any(d.startswith(x + "/") for x in done):
            continue
        if os.path.islink(d):
            os.symlink(os.readlink(d), root + d)
        elif os.path.isdir(d):
            bind(d, root + d, True, strict)
            done.append(d)
    os.makedirs(root + "/dev", exist_ok=True)
    for n in DEVICES:
        if os.path.exists("/dev/" + n):
            bind("/dev/" + n, root + "/dev/" + n, False, strict)
    for d, size in (("/dev/shm", cfg["tmp_bytes"]), ("/tmp", cfg["tmp_bytes"])):
        os.makedirs(root + d, exist_ok=True)
        mount("tmpfs", root + d, "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777,size=%d" % size)
    ws_fd = -1
    if cfg.get("ws"):
        ws_fd = overlay_workspace(cfg, root, mode)
    else:
        bind(cfg["dir"], root + cfg["dir"], False, strict)
    if mode == "root":
        # A proc instance of our own (kernel >= 5.8: per-mount options) that
        # shows only the script's uid's processes: the run's own, since each
        # run gets its own uid. joblib/loky and psutil need it. Under a user
        # namespace proc cannot be mounted without a pid namespace, and a bind
        # of the host's /proc would expose the caller's own processes' roots.
        os.makedirs(root + "/proc", exist_ok=True)
        try:
            mount("proc", root + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "hidepid=invisible")
        except OSError:
            pass
    os.makedirs(root + "/.old", exist_ok=True)
    nr = PIVOT_ROOT.get(os.uname().machine)
    if nr is None:
        raise OSError("pivot_root: unknown architecture %s" % os.uname().machine)
    _check(libc().syscall(nr, root.encode(), (root + "/.old").encode()), "pivot_root")
    os.chdir("/")
    _check(libc().umount2(b"/.old", MNT_DETACH), "umount old root")
    os.rmdir("/.old")
    mount(None, "/", None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, None) if strict else None
    if mode == "userns":
        drop_capabilities()
    return ws_fd


def count_procs(uid):
    n = 0
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                if os.stat("/proc/" + p).st_uid == uid:
                    n += 1
            except OSError:
                pass
    return n


def mark_listeners(n):
    """The listening sockets of a guarded run's n markers, one each, in the
    run's network namespace (abstract names: nothing on any filesystem). The
    runner holds them; the process keeps only their names (see guard)."""
    import socket
    tag = os.urandom(8).hex()
    socks, names = [], []
    for k in range(n):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        name = ("\0mlerl-mark-%d-%s-%d" % (os.getpid(), tag, k)).encode()
        s.bind(name)
        s.listen(64)
        socks.append(s)
        names.append(name)
    return socks, names


def hand_over(ctl_fd, ws_fd, socks):
    """Sends the runner this process's pid, the workspace tmpfs and the marker
    sockets on the control socket, then closes them all here."""
    import socket
    fds = ([ws_fd] if ws_fd >= 0 else []) + [s.fileno() for s in socks]
    msg = json.dumps({"pid": os.getpid(), "ws": ws_fd >= 0, "marks": len(socks)}).encode()
    ctl = socket.socket(fileno=ctl_fd)
    try:
        socket.send_fds(ctl, [msg], fds)
    finally:
        ctl.close()
        for s in socks:
            s.close()
        if ws_fd >= 0:
            os.close(ws_fd)


def setup(cfg, status_fd, ctl_fd):
    """Sandbox the current (fresh, single-threaded) process, hand the runner
    what it keeps (ctl_fd, when not -1), then report on status_fd. Returns the
    marker sockets' names (see guard). Never returns on failure."""
    import resource
    try:
        for procs in cfg.get("cgroup_procs") or []:
            with open(procs, "w") as f:
                f.write(str(os.getpid()))
        uid = cfg.get("uid", -1)
        nproc_uid = uid if uid >= 0 else os.getuid()
        nproc = 0
        if cfg["max_procs"] > 0 and not cfg.get("pids_cgroup") and nproc_uid != 0:
            # RLIMIT_NPROC counts every process of the uid, not just ours.
            nproc = count_procs(nproc_uid) + cfg["max_procs"]
        ws_fd = -1
        if cfg["isolation"] != "none":
            ws_fd = isolate(cfg)
        os.chdir(cfg["dir"])
        lim = cfg["limits"]
        if lim["memory_bytes"] > 0:
            resource.setrlimit(resource.RLIMIT_AS, (lim["memory_bytes"], lim["memory_bytes"]))
        if lim["cpu_seconds"] > 0:
            resource.setrlimit(resource.RLIMIT_CPU, (lim["cpu_seconds"], lim["cpu_seconds"] + 2))
        if lim["file_bytes"] > 0:
            resource.setrlimit(resource.RLIMIT_FSIZE, (lim["file_bytes"], lim["file_bytes"]))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if uid >= 0:
            os.setgroups([])
            os.setgid(cfg["gid"])
            os.setuid(uid)
        if nproc > 0:
            resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
        libc().prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
        # Not dumpable: the kernel then refuses /proc/<pid>/mem (its own
        # included, for a process that is not root) and ptrace to every
        # other process, so no process of the run reads this one's memory.
        libc().prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
        os.environ.clear()
        os.environ.update(cfg["env"])
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        socks, names = mark_listeners(cfg.get("marks", 0))
        if ctl_fd >= 0:
            hand_over(ctl_fd, ws_fd, socks)
        elif ws_fd >= 0:
            os.close(ws_fd)
        os.write(status_fd, b"R")
        os.close(status_fd)
        return names
    except BaseException as e:
        try:
            os.write(status_fd, ("E%s: %s" % (type(e).__name__, e)).encode())
        finally:
            os._exit(125)


def compile_source(source, path):
    """Compiles source so that tracebacks carry the line numbers of the file on
    disk: lines ending in MARK were inserted by the instrumenter and do not
    count."""
    lines = source.split(b"\n")
    inserted = [i + 1 for i, l in enumerate(lines) if l.rstrip().endswith(MARK)]
    if not inserted:
        return compile(source, path, "exec", dont_inherit=True)
    import ast
    import bisect
    try:
        tree = ast.parse(source, path)
    except SyntaxError:
        return compile(source, path, "exec", dont_inherit=True)
    ins = set(inserted)

    def orig(n):
        k = bisect.bisect_left(inserted, n)
        return max(1, n - k - 1) if n in ins else n - k

    for node in ast.walk(tree):
        if getattr(node, "lineno", None) is not None:
            node.lineno = orig(node.lineno)
        if getattr(node, "end_lineno", None) is not None:
            node.end_lineno = orig(node.end_lineno)
    return compile(tree, path, "exec", dont_inherit=True)


def run_user(cfg, source, marks):
    """Runs the script as __main__ and exits the process with its status;
    marks are the marker sockets' names of a guarded run (None: unguarded)."""
    import io
    import traceback
    import types
    if not cfg.get("guard"):
        marks = None
    sys.stdin = open(os.devnull)
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8", errors="backslashreplace", line_buffering=True, write_through=True)
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding="utf-8", errors="backslashreplace", line_buffering=True, write_through=True)
    path = os.path.join(cfg["dir"], cfg["script"])
    sys.argv = [cfg["script"]]
    if marks is None:
        sys.path.insert(0, cfg["dir"])
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()  # a forked child must not share the parent's RNG state
    mod = types.ModuleType("__main__")
    mod.__file__ = path
    mod.__builtins__ = __builtins__
    sys.modules["__main__"] = mod
    code = 0
    try:
        compiled = compile_source(source, path)
        if marks is not None:
            guard(cfg, path, compiled, source, marks, mod.__dict__)
        del source
        exec(compiled, mod.__dict__)
    except SystemExit as e:
        if e.code is None:
            code = 0
        elif isinstance(e.code, int):
            code = e.code
        else:
            print(e.code, file=sys.stderr)
            code = 1
    except BaseException as e:
        tb = e.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename == "<string>":
            tb = tb.tb_next
        try:
            traceback.print_exception(type(e), e, tb)
        except BaseException:
            pass
        code = 1
    for s in (sys.stdout, sys.stderr):
        try:
            s.flush()
        except BaseException:
            pass
    os._exit(code & 0xFF)


# The guard of an instrumented run (Request.Marks). A marker line in the
# instrumented source is `__mlerl_mark__(k)`. No marker line, and no token in
# one, is in this process before its marker runs: the runner holds them. Each
# marker has a listening socket of its own (made in setup, in the run's
# network namespace, under an abstract name: on no filesystem) that the
# runner holds and this process does not; the runner answers a connection to
# marker k's socket with marker k's line, and only when the connecting
# process is the script's (SO_PEERCRED: not a child, not another process).
# __mlerl_mark__(k) connects to socket k and writes the answer on stdout only
# when called by that very line of the instrumented code (its code object
# and line), once per marker; an audit hook stops the run when any other code
# connects to a marker's socket, and when the script's process replaces
# itself (exec: a new interpreter, same pid, no hook). So frames and their
# locals (what pandas' query with level= reads), closures, modules, the
# object graph (gc), the process's memory, its descriptors and the
# bootstrap's source hold the sockets' names at most, never a token.
# The hook (which nothing can remove) also stops the run (exit GUARD_EXIT,
# one line on stderr) when the script's own code, or code it reaches
# through an introspection wrapper (ctypes, dis, types), touches frames, code
# objects, the garbage collector, ctypes, marshal or compiles code; when
# anything traces or profiles (a trace function could jump to a marker's
# line); when anything opens a process's memory, or unpickles a known
# gadget (eval, getattr, os.system...). Imports load only from the
# interpreter's own folders: the workspace is not on sys.path and no module
# from a folder the script can write (the workspace, /tmp) is imported, so
# no code the static check has not seen runs in the process.
SENSITIVE = {"sys._getframe", "sys._current_frames", "object.__getattr__", "object.__setattr__", "object.__delattr__",
             "gc.get_objects", "gc.get_referrers", "gc.get_referents", "code.__new__", "function.__new__",
             "marshal.dumps", "marshal.loads", "marshal.load", "marshal.dump", "exec", "compile", "sys.addaudithook",
             "cpython.PyInterpreterState_New", "cpython._PySys_ClearAuditHooks"}
ALWAYS = {"sys.settrace", "sys.setprofile"}
GADGETS = {"builtins": {"eval", "exec", "compile", "getattr", "setattr", "delattr", "__import__", "globals", "locals", "vars", "open", "input", "breakpoint"},
           "operator": {"attrgetter", "methodcaller"}, "_operator": {"attrgetter", "methodcaller"},
           "typing": {"get_type_hints", "ForwardRef", "_eval_type"}, "string": {"Formatter"}, "pandas": {"eval"}}
GADGET_MODULES = ("os", "posix", "nt", "sys", "subprocess", "ctypes", "_ctypes", "gc", "inspect", "types", "marshal",
                  "importlib", "code", "codeop", "runpy", "pickle", "_pickle", "pydoc", "pkgutil", "timeit", "dis",
                  "shelve", "pdb", "bdb", "pty", "webbrowser", "logging.config", "unittest", "pandas.core.computation",
                  "_posixsubprocess", "multiprocessing.util", "shutil", "io", "_io", "socket", "signal", "threading")
PROC_MEMORY = {"mem", "pagemap", "maps", "smaps", "smaps_rollup", "numa_maps"}
# Dicts whose keys are attributes: numpy would read the memory at any
# address a key named __array_interface__ gives it. Their __getattr__ is
# made to refuse dunder names (which no key of honest code is).
DICT_ATTRS = {"sklearn.utils._bunch": "Bunch", "scipy.optimize._optimize": "OptimizeResult", "scipy.io._idl": "AttrDict"}


def no_dunder_keys(module):
    cls = getattr(module, DICT_ATTRS[module.__name__], None)
    orig = getattr(cls, "__getattr__", None)
    if orig is None:
        return

    def __getattr__(self, key):
        if key[:2] == "__" == key[-2:]:
            raise AttributeError(key)
        return orig(self, key)

    cls.__getattr__ = __getattr__


def guard(cfg, path, compiled, source, marks, globs):
    import _socket
    import _thread
    import importlib.machinery
    getframe, write, exit_, get_ident, getpid = sys._getframe, os.write, os._exit, _thread.get_ident, os.getpid
    me = getpid()
    names = list(marks)
    marker_sockets = frozenset(names)
    marker_code = []  # Marker.__call__'s code, once defined
    lib = os.path.dirname(os.__file__) + "/"
    # Wrappers a script could reach introspection through, and that honest
    # code never needs (inspect is not one: scikit-learn and the catalog's
    # edits call inspect.signature).
    skip = (lib + "ctypes/", lib + "dis.py", lib + "types.py")
    busy = set()

    def die(why):
        try:
            write(2, ("\nmlerl sandbox: the run was stopped: %s (an instrumented run may not read frames, code objects or memory, trace, or compile code)\n" % why).encode())
        finally:
            exit_(GUARD_EXIT)

    def scripts_own(f):
        """Whether the innermost frame that is not an introspection wrapper is the script's."""
        while f is not None and f.f_code.co_filename.startswith(skip):
            f = f.f_back
        return f is not None and f.f_code.co_filename == path

    def gadget(mod, name):
        return name in GADGETS.get(mod, ()) or any(mod == m or mod.startswith(m + ".") for m in GADGET_MODULES)

    def hook(event, args):
        if event in ALWAYS:
            die(event)
        if event == "open":
            p = args[0]
            if isinstance(p, bytes):
                p = p.decode(errors="replace")
            if isinstance(p, str) and (os.path.basename(p.rstrip("/")) in PROC_MEMORY or "map_files" in p):
                # A process's memory or its map (where to read it). A
                # relative name may be opened from /proc/self or through
                # a folder handle (dir_fd) the event does not show: only
                # an absolute path elsewhere is let through.
                full = os.path.realpath(p) if os.path.isabs(p) else ""
                if not full or full.startswith("/proc/"):
                    die("open " + p)
            return
        if event == "pickle.find_class" and gadget(str(args[0]), str(args[1])):
            die("unpickling %s.%s" % (args[0], args[1]))
        if event == "os.exec" and getpid() == me:
            die("os.exec (a new interpreter in the script's process)")
        if event == "socket.connect":
            # Only exact str and bytes are compared: a bytearray could change
            # between the connect and this check, a subclass could lie.
            addr = args[1]
            t = type(addr)
            if t is tuple:
                return
            if t is str:
                addr = str.encode(addr, "utf-8", "surrogateescape")
            elif t is not bytes:
                die("connecting a socket to an address of type %s" % t.__name__)
            if addr not in marker_sockets:
                return
            tid = get_ident()
            busy.add(tid)
            try:
                ok = getframe(1).f_code is marker_code[0]
            finally:
                busy.discard(tid)
            if not ok:
                die("connecting to a marker's socket from elsewhere than the marker")
            return
        if event not in SENSITIVE and not event.startswith("ctypes."):
            return
        tid = get_ident()
        if tid in busy:
            return  # the hook's own frame lookups
        busy.add(tid)
        try:
            if scripts_own(getframe(1)):
                what = event if event != "object.__getattr__" else "reading " + str(args[1])
                die(what)
        finally:
            busy.discard(tid)

    # Where each marker may be called from: the remapped line of its line
    # in the instrumented source, in a code object compiled from it.
    lines = source.split(b"\n")
    inserted = [i + 1 for i, l in enumerate(lines) if l.rstrip().endswith(MARK)]
    import bisect
    import re
    want = {}
    for n in inserted:
        m = re.search(rb"__mlerl_mark__\((\d+)\)", lines[n - 1])
        if m:
            k = bisect.bisect_left(inserted, n)
            want.setdefault(int(m.group(1)), set()).add(max(1, n - k - 1))
    codes = []
    todo = [compiled]
    while todo:
        c = todo.pop()
        codes.append(c)
        todo.extend(x for x in c.co_consts if isinstance(x, type(compiled)))
    allowed = {k: {(id(c), ln) for c in codes if "__mlerl_mark__" in c.co_names for ln in lns} for k, lns in want.items()}
    keep = codes  # the code objects must outlive their ids

    printed = set()

    class Marker:
        __slots__ = ()

        def __call__(self, k):
            f = getframe(1)
            if (id(f.f_code), f.f_lineno) not in allowed.get(k, ()) or f.f_code not in keep:
                die("a marker called from elsewhere than its own line")
            # Another process (a forked worker) prints nothing: the runner
            # would not answer it.
            if k in printed or getpid() != me or not 0 <= k < len(names):
                return
            line = b""
            s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
            try:
                s.settimeout(30)
                s.connect(names[k])
                while len(line) < 4096:
                    b = s.recv(4096)
                    if not b:
                        break
                    line += b
            except OSError:
                line = b""
            finally:
                s.close()
            if line:
                printed.add(k)
                write(1, line)

        def __reduce__(self):
            # Pickled into another process (a pool's worker): a no-op there.
            import functools
            return (functools.partial, (int,))

    marker_code.append(Marker.__call__.__code__)
    globs["__mlerl_mark__"] = Marker()
    allowed_dirs = []
    writable = tuple(os.path.realpath(d) + "/" for d in (cfg["dir"], "/tmp", "/dev/shm", cfg["env"].get("TMPDIR", "/tmp")))
    for p in sys.path:
        if p and os.path.isabs(p):
            r = os.path.realpath(p)
            if not (r + "/").startswith(writable):
                allowed_dirs.append(r)
    cache = {}

    def system(entry):
        if not isinstance(entry, str):
            return False
        ok = cache.get(entry)
        if ok is None:
            r = os.path.realpath(entry)
            ok = cache[entry] = any(r == d or r.startswith(d + "/") for d in allowed_dirs)
        return ok

    for name in DICT_ATTRS:
        if name in sys.modules:
            no_dunder_keys(sys.modules[name])

    def patched(loader):
        run = loader.exec_module

        def exec_module(module):
            run(module)
            no_dunder_keys(module)
        loader.exec_module = exec_module

    class SystemOnly:
        """Finds modules in the interpreter's own folders only."""

        @staticmethod
        def find_spec(name, path=None, target=None):
            entries = list(sys.path if path is None else path)
            ok = [e for e in entries if system(e)]
            spec = importlib.machinery.PathFinder.find_spec(name, ok, target)
            if spec is not None and name in DICT_ATTRS and spec.loader is not None:
                patched(spec.loader)
            if spec is not None or len(ok) == len(entries):
                return spec
            if importlib.machinery.PathFinder.find_spec(name, [e for e in entries if not system(e)], target) is not None:
                raise ModuleNotFoundError("No module named %r (an instrumented run imports only installed modules)" % name, name=name)
            return None

    sys.meta_path.insert(0, SystemOnly())
    sys.addaudithook(hook)


def read_all(fd):
    chunks = []
    while True:
        b = os.read(fd, 1 << 16)
        if not b:
            break
        chunks.append(b)
    os.close(fd)
    return b"".join(chunks)


def cold(cfg):
    source = read_all(3)
    marks = setup(cfg, 4, 5)
    run_user(cfg, source, marks)


def serve(cfg):
    import selectors
    import socket
    import select
    for m in cfg.get("preload", []):
        try:
            __import__(m)
        except Exception as e:
            print("mlerl worker: preload %s: %s" % (m, e), file=sys.stderr)
    import ast, bisect, ctypes, io, resource, traceback, types  # noqa: F401  (children need them)
    libc().prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    import gc
    gc.collect()
    gc.freeze()  # children's collections skip the preloaded objects: no copy-on-write of the shared heap
    sock = socket.socket(fileno=3)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    os.set_blocking(wake_r, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *a: None)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    running = {}  # pid -> request id

    def send(obj):
        sock.send(json.dumps(obj).encode())

    def start(req, fds):
        src_r, out_w, err_w, ctl = fds
        st_r, st_w = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            try:
                os.setpgid(0, 0)
                signal.set_wakeup_fd(-1)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                sock.close()
                for fd in (wake_r, wake_w, st_r):
                    os.close(fd)
                null = os.open(os.devnull, os.O_RDONLY)
                os.dup2(null, 0)
                os.dup2(out_w, 1)
                os.dup2(err_w, 2)
                for fd in (null, out_w, err_w):
                    os.close(fd)
                source = read_all(src_r)
            except BaseException:
                os._exit(125)
            marks = setup(req, st_w, ctl)
            run_user(req, source, marks)
        try:
            os.setpgid(pid, pid)
        except OSError:
            pass
        for fd in (src_r, out_w, err_w, ctl, st_w):
            os.close(fd)
        running[pid] = req["id"]
        status = b""
        r, _, _ = select.select([st_r], [], [], 30)
        if r:
            status = read_all(st_r)
        else:
            os.close(st_r)
            os.killpg(pid, signal.SIGKILL)
            status = b"Esandbox setup did not finish within 30 s"
        ok = status == b"R"
        send({"id": req["id"], "event": "started", "pid": pid, "ok": ok, "error": "" if ok else status[1:].decode(errors="replace")})

    def reap():
        while True:
            try:
                pid, st, ru = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            rid = running.pop(pid, None)
            if rid is None:
                continue  # an orphaned grandchild (we are the subreaper)
            try:
                os.killpg(pid, signal.SIGKILL)  # stragglers left in the group
            except OSError:
                pass
            msg = {"id": rid, "event": "exit", "maxrss_kb": ru.ru_maxrss, "cpu_s": ru.ru_utime + ru.ru_stime}
            if os.WIFSIGNALED(st):
                msg["signal"] = os.WTERMSIG(st)
            else:
                msg["code"] = os.WEXITSTATUS(st)
            send(msg)

    sel = selectors.DefaultSelector()
    sel.register(sock, selectors.EVENT_READ, "sock")
    sel.register(wake_r, selectors.EVENT_READ, "wake")
    send({"event": "ready", "pid": os.getpid()})
    while True:
        for key, _ in sel.select():
            if key.data == "wake":
                try:
                    while os.read(wake_r, 512):
                        pass
                except BlockingIOError:
                    pass
                reap()
                continue
            try:
                msg, fds, _, _ = socket.recv_fds(sock, 1 << 20, 8)
            except InterruptedError:
                continue
            if not msg:
                for pid in list(running):
                    try:
                        os.killpg(pid, signal.SIGKILL)
                    except OSError:
                        pass
                os._exit(0)
            req = json.loads(msg)
            if req["op"] == "run":
                if len(fds) != 4:
                    for fd in fds:
                        os.close(fd)
                    send({"id": req["id"], "event": "started", "pid": 0, "ok": False, "error": "want 4 file descriptors, got %d" % len(fds)})
                    send({"id": req["id"], "event": "exit", "code": 125})
                    continue
                start(req, fds)
            elif req["op"] == "kill":
                for pid, rid in running.items():
                    if rid == req["id"]:
                        try:
                            os.killpg(pid, signal.SIGKILL)
                        except OSError:
                            pass
            for fd in fds if req["op"] != "run" else ():
                os.close(fd)
        reap()


def probe(cfg):
    setup(cfg, 4, -1)
    os._exit(0)


if __name__ == "__main__":
    _cfg = json.loads(sys.argv[2])
    {"cold": cold, "serve": serve, "probe": probe}[sys.argv[1]](_cfg)
