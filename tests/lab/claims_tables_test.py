#!/usr/bin/python3
"""tools/claims_tables.py: --check passes on a document written from the data, fails (exit 1,
naming the command that rewrites it) once the data changes, and the rewrite brings it back;
a document without a part's place is refused (exit 2) and left as it was."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOL = os.path.join(ROOT, "tools", "claims_tables.py")


def run(*args):
    p = subprocess.run([sys.executable, TOOL, *args], capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


def main():
    work = tempfile.mkdtemp(prefix="claims-tables-test-")
    try:
        data, doc = os.path.join(work, "claims.json"), os.path.join(work, "claims.md")
        shutil.copy(os.path.join(ROOT, "src", "lab", "claims.json"), data)
        shutil.copy(os.path.join(ROOT, "docs", "claims.md"), doc)
        files = ["--data", data, "--doc", doc]
        assert run("--check", *files)[0] == 0, "the repository's docs/claims.md should be current"

        catalogue = json.load(open(data, encoding="utf-8"))
        catalogue["claims"][6]["title"] = "A title changed in the data"
        json.dump(catalogue, open(data, "w", encoding="utf-8"), ensure_ascii=False)
        status, out = run("--check", *files)
        assert status == 1 and "tools/claims_tables.py" in out and "out of date" in out, (status, out)
        assert run(*files)[0] == 0
        assert "A title changed in the data" in open(doc, encoding="utf-8").read()
        assert run("--check", *files)[0] == 0

        text = open(doc, encoding="utf-8").read()
        broken = text.replace("<!-- end of part origins -->", "")
        open(doc, "w", encoding="utf-8").write(broken)
        status, out = run(*files)
        assert status == 2 and "origins" in out, (status, out)
        assert open(doc, encoding="utf-8").read() == broken, "a refused rewrite must leave the document alone"
    finally:
        shutil.rmtree(work)
    print("claims_tables: ok")


if __name__ == "__main__":
    main()
