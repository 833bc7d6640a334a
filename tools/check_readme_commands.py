#!/usr/bin/env python3
"""Fails if the README's test command is not the command .ci/run executes."""
import pathlib, re, sys
root = pathlib.Path(__file__).resolve().parent.parent
readme = (root / "README.md").read_text()
blocks = re.findall(r"```sh\n(.*?)\n```", readme, re.S)
if len(blocks) < 2:
    sys.exit("README.md: expected the two set-up commands as the first two ```sh blocks")
test_cmd = blocks[1].strip()
ci = (root / ".ci/run").read_text()
if test_cmd not in ci.splitlines():
    sys.exit(f"README test command not run verbatim by .ci/run:\n  {test_cmd}")
print("README test command matches .ci/run")
