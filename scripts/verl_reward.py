"""mlerl's environment reward as a verl custom reward function.

verl (https://github.com/volcengine/verl) trains 3B-7B policies on GPUs
with Ray. This module lets it score each generated action with mlerl's own
environment and reward: the action is sent to `mlerl serve-env`, which
restores the expert state's snapshot in a sandbox, carries the action out
and answers the reward (the same terms `mlerl train ppo` uses).

Use it with the verl export of `mlerl dataset`: the training file
exports/rl_states/vN/verl_train.parquet (held-in states; rows carry
extra_info.state_id and reward_model.ground_truth, a JSON object holding
the snapshot_ref) and the validation file verl_val.parquet beside it
(held-out tasks' states; no state_id, since they are in no rl_states
dataset, so this adapter sends the ground truth's snapshot_ref, which
serve-env accepts with or without --rl_states):

    mlerl serve-env --data gs://bucket/data --rl_states rl_states/vN --addr :8080 --token_file token
    python3 -m verl.trainer.main_ppo \\
        data.train_files=.../exports/rl_states/vN/verl_train.parquet \\
        data.val_files=.../exports/rl_states/vN/verl_val.parquet \\
        data.max_prompt_length=512 \\
        reward.custom_reward_function.path=scripts/verl_reward.py \\
        reward.custom_reward_function.name=compute_score ...

(verl 0.9 reads reward.custom_reward_function; the top-level
custom_reward_function of earlier versions is still migrated there.)

The prompt column holds the compact prompt (one user message) unless the
dataset stage ran with verl_prompt: full (a system and a user message,
4-8k tokens); rl_states/vN/stats.md gives each file's prompt lengths as
a Qwen3 chat template counts them (the policy's own tokenizer and
template with `mlerl dataset --export_tokenizer DIR`): set
data.max_prompt_length to at least the longest, or verl drops
(filter_overlong_prompts) or refuses (truncation: error) the longer rows.

The action is what follows a leading reasoning block: a Qwen3 policy
trained with thinking on answers "<think>\\n\\n</think>\\n\\nReflection: ...",
and a template that opens the block in the generation prompt leaves
"...</think>" at the start of the answer; the environment reads the
MLAgentBench fields alone, so the adapter drops everything up to the
first </think> when no Reflection field comes before it. A block that
never closes is sent whole (a format error).

Settings (environment variables of the verl reward workers):
  MLERL_ENV_URL      serve-env's base URL (default http://127.0.0.1:8080;
                     https://... when serve-env runs with tls_cert)
  MLERL_ENV_TIMEOUT  seconds to wait for one answer (default 900)
  MLERL_ENV_RETRIES  retries when the server is busy (429), draining (503)
                     or unreachable (default 6, exponential backoff)
  MLERL_SERVE_TOKEN_FILE  file holding serve-env's bearer token (the same
                     secret as its token_file), or
  MLERL_SERVE_TOKEN  the token itself; sent as Authorization: Bearer
  MLERL_ENV_CA_FILE  PEM CA certificate(s) that signed serve-env's TLS
                     certificate (https URLs: the server's certificate is
                     verified against them; without it, against the
                     system's CAs)

`python3 verl_reward.py ready` GETs /readyz with the same settings and
exits 0 when the server is ready (the Kubernetes readiness probe, which
cannot send a secret header itself).

Only the Python standard library is used. An environment failure raises
EnvServerError instead of returning a made-up reward: a silent 0 would
corrupt training.
"""

import json
import os
import random
import ssl
import sys
import time
import urllib.error
import urllib.request

DEFAULT_URL = "http://127.0.0.1:8080"

# Statuses worth retrying: busy, draining or restarting. A 504 (the action
# ran past the server's request_timeout) is not retried: it would run again
# just as long.
_RETRY_STATUS = (429, 502, 503)


class EnvServerError(RuntimeError):
    """serve-env refused the request or the environment failed."""


def _settings():
    url = os.environ.get("MLERL_ENV_URL", DEFAULT_URL).rstrip("/")
    timeout = float(os.environ.get("MLERL_ENV_TIMEOUT", "900"))
    retries = int(os.environ.get("MLERL_ENV_RETRIES", "6"))
    return url, timeout, retries


def _headers():
    """The request headers: JSON, and the bearer token when one is set."""
    headers = {"Content-Type": "application/json"}
    token = None
    path = os.environ.get("MLERL_SERVE_TOKEN_FILE")
    if path:
        try:
            with open(path, encoding="utf-8") as f:
                token = f.read().strip()
        except OSError as e:
            raise EnvServerError("MLERL_SERVE_TOKEN_FILE %s: %s" % (path, e.strerror)) from None
        if not token:
            raise EnvServerError("MLERL_SERVE_TOKEN_FILE %s is empty" % path)
    elif os.environ.get("MLERL_SERVE_TOKEN", "").strip():
        token = os.environ["MLERL_SERVE_TOKEN"].strip()
    if token:
        headers["Authorization"] = "Bearer " + token
    return headers


def _context():
    """The TLS context for https URLs: MLERL_ENV_CA_FILE's CAs, else the system's."""
    ca = os.environ.get("MLERL_ENV_CA_FILE")
    if not ca:
        return None
    try:
        return ssl.create_default_context(cafile=ca)
    except (OSError, ssl.SSLError) as e:
        raise EnvServerError("MLERL_ENV_CA_FILE %s: %s" % (ca, e)) from None


def step(action, state_id=None, snapshot_ref=None):
    """POST one action for one state to serve-env's /v1/step.

    Returns the decoded answer: reward, terms, outcome, duration_s,
    observation, ... Raises EnvServerError with the server's message.
    """
    if not state_id and not snapshot_ref:
        raise EnvServerError("no state: give extra_info.state_id or a ground_truth with snapshot_ref")
    url, timeout, retries = _settings()
    body = {"action": action}
    if state_id:
        body["state_id"] = str(state_id)
    if snapshot_ref:
        body["snapshot_ref"] = str(snapshot_ref)
    data = json.dumps(body).encode("utf-8")
    headers, context = _headers(), _context()
    delay = 0.5
    for attempt in range(retries + 1):
        req = urllib.request.Request(url + "/v1/step", data=data, method="POST", headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=timeout, context=context) as resp:
                return json.loads(resp.read().decode("utf-8"))
        except urllib.error.HTTPError as e:
            msg = _error_message(e)
            if e.code == 401:
                msg += " (set MLERL_SERVE_TOKEN_FILE or MLERL_SERVE_TOKEN to serve-env's token)"
            if e.code not in _RETRY_STATUS or attempt == retries:
                raise EnvServerError("serve-env %s: HTTP %d: %s" % (url, e.code, msg)) from None
            wait = _retry_after(e, delay)
        except (urllib.error.URLError, ConnectionError, TimeoutError) as e:
            if attempt == retries:
                raise EnvServerError("serve-env %s unreachable after %d tries: %s (is `mlerl serve-env` running there? set MLERL_ENV_URL)"
                                     % (url, retries + 1, getattr(e, "reason", e))) from None
            wait = delay
        time.sleep(wait * (1 + 0.25 * random.random()))
        delay = min(delay * 2, 30.0)
    raise EnvServerError("unreachable")  # the loop always returns or raises


def _error_message(e):
    try:
        return json.loads(e.read().decode("utf-8"))["error"]
    except Exception:  # not our JSON error: say what came back
        return e.reason


def _retry_after(e, default):
    try:
        return max(float(e.headers.get("Retry-After", default)), default)
    except (TypeError, ValueError):
        return default


def _snapshot_ref(ground_truth):
    """The snapshot_ref of the verl export's ground_truth (JSON text or dict)."""
    if isinstance(ground_truth, (bytes, bytearray)):
        ground_truth = ground_truth.decode("utf-8")
    if isinstance(ground_truth, str):
        if not ground_truth.strip():
            return None
        try:
            ground_truth = json.loads(ground_truth)
        except ValueError:
            raise EnvServerError("ground_truth is not the JSON object `mlerl dataset` exports: %r" % ground_truth[:80]) from None
    if isinstance(ground_truth, dict):
        return ground_truth.get("snapshot_ref") or None
    return None


def action_text(solution_str):
    """The answer without a leading reasoning block (see the module doc)."""
    end = solution_str.find("</think>")
    if end < 0 or "Reflection:" in solution_str[:end]:
        return solution_str
    return solution_str[end + len("</think>"):].lstrip("\n")


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    """verl's custom reward function: the environment's reward (a float)
    for the policy's answer solution_str from the state of this row."""
    state_id = (extra_info or {}).get("state_id")
    answer = step(action_text(solution_str), state_id=state_id, snapshot_ref=_snapshot_ref(ground_truth))
    return float(answer["reward"])


def ready():
    """GET /readyz with the adapter's settings: True when the server is ready."""
    url, timeout, _ = _settings()
    req = urllib.request.Request(url + "/readyz", headers=_headers())
    try:
        with urllib.request.urlopen(req, timeout=min(timeout, 10), context=_context()) as resp:
            return resp.status == 200
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return False


if __name__ == "__main__":
    if sys.argv[1:] != ["ready"]:
        sys.exit("usage: verl_reward.py ready  (exit 0 when serve-env at MLERL_ENV_URL is ready)")
    sys.exit(0 if ready() else 1)
