#!/usr/bin/env python3
"""Keeps docs/architecture.md true: reads its tables and checks the code.

- Every #include "folder/..." in src/ stays in its folder or goes to a lower
  floor, and each folder uses exactly the folders the table lists.
- libtorch headers only where the table says yes; no CUDA/NCCL in common/.
- A public header (include/dtrain/X.h) counts as its owner room's, as the
  public-header table says.
- Inside train/, a file includes only files listed before it (or on its row).
- Every file of train/ is in that list, and no function of src/ is longer
  than 80 lines (CUDA kernels, *.cu, excepted: docs/architecture.md says why).

Usage: layers_test.py SOURCE_DIR   (exit 1 with one line per problem)
"""
import os
import re
import sys

MAX_FUNCTION_LINES = 80


def table_rows(text, heading):
    """Rows (lists of cells) of the first Markdown table after `heading`."""
    start = text.index(heading)
    rows = []
    for line in text[start:].splitlines()[1:]:  # past the header row
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not set(cells[0]) <= set("-"):  # not the |---| line
            rows.append(cells)
    return rows


def source_files(root, folder):
    for base, _, files in os.walk(os.path.join(root, "src", folder)):
        for name in sorted(files):
            if name.endswith((".h", ".cc", ".cu", ".cuh", ".in")):
                yield os.path.join(base, name)


INCLUDE = re.compile(r'^\s*#\s*include\s+([<"])([^>"]+)[>"]')


def includes(path):
    with open(path, errors="replace") as f:
        for number, line in enumerate(f, 1):
            m = INCLUDE.match(line)
            if m:
                yield number, m.group(1), m.group(2)


def public_owners(text):
    """{"optim.h": "optim", ...} from the public-header table."""
    owners = {}
    for cells in table_rows(text, "| public header"):
        for name in cells[0].split(","):
            owners[name.strip()] = cells[1]
    return owners


def check_floors(root, text, problems):
    owners = public_owners(text)
    for name in sorted(os.listdir(os.path.join(root, "include", "dtrain"))):
        if name not in owners:
            problems.append(f"include/dtrain/{name} is not in the public-header table of docs/architecture.md")
    rows = table_rows(text, "| folder | floor |")
    floor = {r[0]: int(r[1]) for r in rows}
    listed_uses = {r[0]: r[2] for r in rows}
    torch_ok = {r[0]: r[3].startswith("yes") for r in rows}
    actual_src = set(os.listdir(os.path.join(root, "src")))
    for folder in sorted(actual_src - set(floor)):
        if os.path.isdir(os.path.join(root, "src", folder)):
            problems.append(f"src/{folder}/ is not in the floor table of docs/architecture.md")
    for folder in sorted(floor):
        used = set()
        for path in source_files(root, folder):
            rel = os.path.relpath(path, root)
            for number, kind, name in includes(path):
                head = name.split("/")[0]
                if kind == '"' and head == "dtrain":
                    head = owners.get(name.split("/")[-1], head)
                if kind == '"' and head in floor and head != folder:
                    used.add(head)
                    if floor[head] >= floor[folder]:
                        problems.append(f"{rel}:{number}: {folder}/ (floor {floor[folder]}) includes {name} "
                                        f"(floor {floor[head]})")
                torch = kind == "<" and head in ("torch", "ATen", "c10") or (kind == '"' and head == "libtorch")
                if torch and not torch_ok[folder]:
                    problems.append(f"{rel}:{number}: {folder}/ must not include libtorch ({name})")
                cuda = name.startswith(("cuda", "nccl.h", "gpu/"))
                if folder == "common" and cuda:
                    problems.append(f"{rel}:{number}: common/ must not include CUDA or NCCL headers ({name})")
        expected = listed_uses[folder]
        if expected.startswith("every lower floor"):
            continue
        want = set() if expected in ("—", "-", "") else {u.strip() for u in expected.split(",")}
        if want != used:
            problems.append(f"{folder}/ uses {', '.join(sorted(used)) or 'nothing'} but docs/architecture.md says "
                            f"{', '.join(sorted(want)) or 'nothing'}")


def check_train_room(root, text, problems):
    order = {}
    for cells in table_rows(text, "| order | files |"):
        for name in cells[1].split(","):
            order[name.strip()] = int(cells[0])
    for path in source_files(root, "train"):
        rel = os.path.relpath(path, root)
        stem = os.path.splitext(os.path.basename(path))[0]
        if stem not in order:
            problems.append(f"{rel} is not in the train/ table of docs/architecture.md")
            continue
        for number, kind, name in includes(path):
            m = re.match(r"train/(\w+)\.h$", name)
            if kind == '"' and m and m.group(1) != stem:
                other = m.group(1)
                if order.get(other, 99) > order[stem]:
                    problems.append(f"{rel}:{number}: includes {name}, which is above it in train/")


FUNCTION_START = re.compile(r"^[A-Za-z_][\w:<>,*&~ ]*[\w>)&*]\s*\(.*")


def check_function_lengths(root, problems):
    paths = [p for folder in sorted(os.listdir(os.path.join(root, "src")))
             for p in source_files(root, folder) if p.endswith(".cc")]
    for path in paths:
        lines = open(path, errors="replace").read().splitlines()
        start = None
        for i, line in enumerate(lines):
            if start is None:
                if FUNCTION_START.match(line) and not line.startswith(("namespace", "struct", "class", "enum",
                                                                        "using", "template", "#")):
                    start = i
                continue
            if line.startswith("}"):
                length = i - start + 1
                if length > MAX_FUNCTION_LINES:
                    rel = os.path.relpath(path, root)
                    problems.append(f"{rel}:{start + 1}: a function of {length} lines (at most "
                                    f"{MAX_FUNCTION_LINES}): {lines[start].strip()}")
                start = None
            elif not line.strip() and i + 1 < len(lines) and FUNCTION_START.match(lines[i + 1]) and \
                    lines[i - 1].rstrip().endswith(";"):
                start = None  # a declaration, not a definition


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    text = open(os.path.join(root, "docs", "architecture.md")).read()
    problems = []
    check_floors(root, text, problems)
    check_train_room(root, text, problems)
    check_function_lengths(root, problems)
    for p in problems:
        print(p)
    print(f"layers_test: {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
