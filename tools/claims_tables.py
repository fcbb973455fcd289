#!/usr/bin/python3
"""Writes the tables of docs/claims.md from src/lab/claims.json, the lab's one catalogue of claims.

    /usr/bin/python3 tools/claims_tables.py           # rewrite the tables in docs/claims.md
    /usr/bin/python3 tools/claims_tables.py --check   # exit 1 if docs/claims.md is out of date

Each part of the catalogue (a claim's or source's "part": articles, after-2017, origins) has its
place in docs/claims.md between the lines
    <!-- tables of part NAME: written by tools/claims_tables.py from src/lab/claims.json -->
    <!-- end of part NAME -->
and the prose around them is the document's own. ctest's Lab.claims_doc_current runs --check.
"""
import argparse
import json
import os
import re
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "src", "lab", "claims.json")
DOC = os.path.join(ROOT, "docs", "claims.md")
REGENERATE = "/usr/bin/python3 tools/claims_tables.py"
BEGIN = "<!-- tables of part {}: written by tools/claims_tables.py from src/lab/claims.json -->"
END = "<!-- end of part {} -->"
BLOCK = re.compile(r"^<!-- tables of part ([\w-]+): .*? -->\n.*?^<!-- end of part \1 -->$", re.M | re.S)


def cell(text):
    """A table cell: one line, with the pipes that would end it escaped."""
    return " ".join(text.split()).replace("|", "\\|")


def row(*cells):
    return "| " + " | ".join(cell(c) for c in cells) + " |"


def number(x):
    """A threshold as the data writes it (1, 0.5, 1e-09 → 1e-9)."""
    text = repr(x) if isinstance(x, float) else str(x)
    return re.sub(r"e-0*(\d)", r"e-\1", text)


def source_rows(sources):
    out = ["| source | what it is | original |", "|---|---|---|"]
    for s in sources:
        what = s["title"]
        if s.get("original_title"):
            what += " — " + s["original_title"]
        if s.get("note"):
            what += "; " + s["note"]
        out.append(row(s["id"], what, "<" + s["url"] + ">" if s.get("url") else "(no address given)"))
    return out


def claim_rows(claims):
    """One row per claim; its main check is the check whose contradiction refutes it (the report's rule)."""
    out = ["| id | claim | main check | measurable prediction |", "|----|-------|-----|-----------------------|"]
    for c in claims:
        out.append(row(c["id"], c["title"] + " [" + ", ".join(c.get("sources", [])) + "]", "`" + c["main_check"] + "`",
                       c["prediction"]))
    return out


def quote_rows(claims):
    out = ["| claim | source | words | in English |", "|---|---|---|---|"]
    for c in claims:
        for q in c.get("quotes", []):
            words = q["original"] + (" (" + q["where"] + ")" if q.get("where") else "")
            out.append(row(c["id"], q["source"], words, q.get("english") or "(as written)"))
    return out


def threshold_rows(claims):
    out = ["| claim | threshold | value | its rule |", "|---|---|---|---|"]
    for c in claims:
        for name, t in c.get("thresholds", {}).items():
            out.append(row(c["id"], "`" + name + "`", number(t["value"]), t["rule"]))
    return out


def part_tables(data, part):
    sources = [s for s in data["sources"] if s["part"] == part]
    claims = [c for c in data["claims"] if c["part"] == part]
    lines = [BEGIN.format(part), "", "Sources:", ""] + source_rows(sources)
    lines += ["", "Claims:", ""] + claim_rows(claims)
    if any(c.get("quotes") for c in claims):
        lines += ["", "The sources' words, as the report quotes them:", ""] + quote_rows(claims)
    if any(c.get("thresholds") for c in claims):
        lines += ["", "Verdict thresholds (the numbers the experiments' verdict rules compare against):", ""]
        lines += threshold_rows(claims)
    return "\n".join(lines + ["", END.format(part)])


def parts_in_order(data):
    parts = []
    for entry in data["sources"] + data["claims"]:
        if entry.get("part") not in parts:
            parts.append(entry.get("part"))
    return parts


def rendered(data, doc):
    """docs/claims.md with every part's tables written from the data; ValueError if a part has no place."""
    parts = parts_in_order(data)
    found = [m.group(1) for m in BLOCK.finditer(doc)]
    missing = [p for p in parts if p not in found]
    unknown = [p for p in found if p not in parts]
    if missing or unknown:
        raise ValueError("docs/claims.md: parts without a place for their tables: {}; places for parts the data lacks: {} "
                         "(each part needs the two marker lines described in tools/claims_tables.py)".format(
                             ", ".join(map(str, missing)) or "none", ", ".join(unknown) or "none"))
    return BLOCK.sub(lambda m: part_tables(data, m.group(1)), doc)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if docs/claims.md is out of date (write nothing)")
    ap.add_argument("--data", default=DATA, help="the catalogue (default: src/lab/claims.json)")
    ap.add_argument("--doc", default=DOC, help="the document (default: docs/claims.md)")
    args = ap.parse_args()
    try:
        with open(args.data, encoding="utf-8") as f:
            data = json.load(f)
        with open(args.doc, encoding="utf-8") as f:
            doc = f.read()
        new = rendered(data, doc)
    except (OSError, ValueError, KeyError) as e:  # json.JSONDecodeError is a ValueError
        print("claims_tables: " + (str(e) if not isinstance(e, KeyError) else "an entry has no field " + str(e)),
              file=sys.stderr)
        return 2
    if args.check:
        if new != doc:
            print("{} is out of date with {}: run {}".format(os.path.relpath(args.doc, ROOT), os.path.relpath(args.data, ROOT),
                                                              REGENERATE), file=sys.stderr)
            return 1
        return 0
    if new != doc:
        # Written beside the document and renamed over it: a failed write never leaves half a file.
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(args.doc)), prefix=".claims.md.")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(new)
        os.chmod(tmp, 0o644)
        os.replace(tmp, args.doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
