#!/usr/bin/env python3
"""Keeps the OS seam in common/ (docs/architecture.md, "The OS is reached
through common/"):

- the environment is read through common/ (env.h, the settings registry):
  no getenv call outside src/common/;
- socket headers (<sys/socket.h>, <netdb.h>, <arpa/inet.h>, <netinet/...>)
  only in src/common/ and the transports that speak TCP themselves: the TCP
  store (src/store/tcp_store_*) and the Gloo backend (src/comm/gloo/).

Usage: os_seam_test.py SOURCE_DIR   (exit 1 with one line per problem)
"""
import os
import re
import sys

SUFFIXES = (".h", ".cc", ".cu", ".cuh", ".in")
GETENV = re.compile(r"\bgetenv\s*\(|\bsecure_getenv\s*\(")
SOCKET_HEADER = re.compile(r"^\s*#\s*include\s*<(sys/socket\.h|netdb\.h|arpa/inet\.h|netinet/[^>]+)>")


def getenv_allowed(rel):
    return rel.startswith("src/common/")


def socket_headers_allowed(rel):
    return rel.startswith(("src/common/", "src/comm/gloo/", "src/store/tcp_store_"))


def code_of(line):
    """The line without its // comment (good enough: no getenv in strings)."""
    return line.split("//", 1)[0]


def check_file(root, path, problems):
    rel = os.path.relpath(path, root).replace(os.sep, "/")
    with open(path, errors="replace") as f:
        for number, line in enumerate(f, 1):
            if not getenv_allowed(rel) and GETENV.search(code_of(line)):
                problems.append(f"{rel}:{number}: getenv outside src/common/ (use common/env.h or a "
                                f"setting of common/settings.h): {line.strip()}")
            m = SOCKET_HEADER.match(line)
            if m and not socket_headers_allowed(rel):
                problems.append(f"{rel}:{number}: <{m.group(1)}> outside src/common/, src/store/tcp_store_* "
                                f"and src/comm/gloo/ (add a function to common/socket.h or "
                                f"common/address.h)")


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    problems = []
    for base, _, files in os.walk(os.path.join(root, "src")):
        for name in sorted(files):
            if name.endswith(SUFFIXES):
                check_file(root, os.path.join(base, name), problems)
    for p in problems:
        print(p)
    print(f"os_seam_test: {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
