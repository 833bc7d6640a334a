#!/usr/bin/env python3
"""Fails if the README's set-up commands drift from what .ci/run executes: the test command must be
run verbatim, the main command's strata-serve invocation must be the one the smoke test starts
(port aside), and the answer the README shows must be the golden text the tests check."""
import pathlib, re, sys
root = pathlib.Path(__file__).resolve().parent.parent
readme = (root / "README.md").read_text()
blocks = re.findall(r"```sh\n(.*?)\n```", readme, re.S)
if len(blocks) < 2:
    sys.exit("README.md: expected the two set-up commands as the first two ```sh blocks")
main_cmd, test_cmd = blocks[0].strip(), blocks[1].strip()
ci = (root / ".ci/run").read_text()
if test_cmd not in ci.splitlines():
    sys.exit(f"README test command not run verbatim by .ci/run:\n  {test_cmd}")
serve = main_cmd.split("&&")[-1].strip()
without_port = lambda s: re.sub(r"--port \d+", "--port N", s)
if not any(without_port(line.strip().rstrip("&").strip()) == without_port(serve) for line in ci.splitlines()):
    sys.exit(f"README main command's server is not what .ci/run's smoke test starts:\n  {serve}")
golden = (root / "tests/fixtures/demo/golden_answer.txt").read_text()
if golden.strip() not in readme:
    sys.exit("README.md does not show the demo model's answer of tests/fixtures/demo/golden_answer.txt")
print("README commands match .ci/run; README shows the golden answer")
