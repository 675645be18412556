#!/usr/bin/env python3
"""relink_report_copies.py DIR...: make the links of report copies resolve.

A run's reports are written beside their plots, transcripts and cells'
folders (DATA/reports/experiment-<name>/, cells/<cell>/report.md); a run
script copies the Markdown into docs/ (docs/run16/chain.sh: report.md, the
grid's plots, each cell's report as cell-<cell>-report.md) and leaves the
rest behind. In every report mlerl wrote among DIR's *.md files (its first
line is "# Experiment <name>" or "# Evaluation report"), this rewrites:

- a link to cells/<cell>/report.md into one to the copy beside it,
  cell-<cell>-report.md, when that copy is there;
- every other relative link or image whose file is not beside the copy,
  and every image of a cell report's copy (cell-*.md: its plots stayed in
  the cell's folder; a file of the same name beside it is the grid's),
  into plain text naming the file, marked "not committed";

and, when it changed anything, adds one note under the heading saying so.
Nothing else changes: every number, date and path stays as the run wrote
it. Running it again changes nothing (docs/ links are checked by
docs/links_test.go).
"""
import os
import re
import sys

NOTE = ("> A copy of the report as the run wrote it, but for its links: those to "
        "the cells' reports point at their copies beside it, those to files left "
        "in the run's report folder are plain text marked \"not committed\".")
HEADINGS = ("# Experiment ", "# Evaluation report")
LINK = re.compile(r"(!?)\[([^\]]*)\]\(([^)\s]+)\)")
CELL = re.compile(r"^cells/([^/]+)/report\.md$")


def relink(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if not text.startswith(HEADINGS):
        return False
    folder = os.path.dirname(path)
    cell_copy = os.path.basename(path).startswith("cell-")

    def fix(m):
        image, label, target = m.group(1), m.group(2), m.group(3)
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            return m.group(0)  # a URL or an anchor of this page
        file = target.split("#", 1)[0]
        cell = CELL.match(file)
        if cell and os.path.exists(os.path.join(folder, f"cell-{cell.group(1)}-report.md")):
            return f"[{label}](cell-{cell.group(1)}-report.md)"
        if os.path.exists(os.path.join(folder, file)) and not (image and cell_copy):
            return m.group(0)
        if image:
            return f"*{label} (`{file}`, not committed)*"
        if label in (file, f"`{file}`"):
            return f"`{file}` (not committed)"
        return f"{label} (`{file}`, not committed)"

    fixed = LINK.sub(fix, text)
    # An evaluation report captions each plot with its alt text: one copy.
    fixed = re.sub(r"\*(.+?) \(`([^`]+)`, not committed\)\*\n\n\*\1\*", r"*\1* (`\2`, not committed)", fixed)
    if fixed == text:
        return False
    if NOTE not in fixed:
        head, _, rest = fixed.partition("\n")
        fixed = f"{head}\n\n{NOTE}\n{rest}"
    with open(path, "w", encoding="utf-8") as f:
        f.write(fixed)
    return True


def main(dirs):
    if not dirs:
        sys.exit("usage: relink_report_copies.py DIR...")
    for d in dirs:
        if not os.path.isdir(d):
            sys.exit(f"relink_report_copies.py: {d} is not a folder")
        for name in sorted(os.listdir(d)):
            p = os.path.join(d, name)
            if name.endswith(".md") and os.path.isfile(p) and relink(p):
                print(f"relinked {p}")


if __name__ == "__main__":
    main(sys.argv[1:])
