#!/usr/bin/python3
"""Renders a Jinja template with Python's jinja2 as Hugging Face transformers does (the oracle of
kvrun's own Jinja engine, tests/test_jinja.cpp). Needs Debian's python3-jinja2.

Usage: render_jinja.py TEMPLATE.jinja CONTEXTS.json

CONTEXTS.json is a list of objects, each the template's variables for one render, plus "__now__"
("YYYY-MM-DD", the date strftime_now() formats). Writes a JSON list to stdout with, per context,
{"ok": true, "text": ...} or {"ok": false, "error": "Type: message"}. A template that does not
compile gives that error for every context. Exit status 4 when jinja2 is missing.
"""

import datetime
import json
import sys

import render_chat_template  # the same directory: the oracle environment (exits 4 without jinja2)

def make_environment(now):
    """transformers' environment (render_chat_template.py) without the generation tag, which
    kvrun's engine does not implement."""
    return render_chat_template.make_environment(now, generation=False)


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        source = f.read()
    with open(sys.argv[2], encoding="utf-8") as f:
        contexts = json.load(f)
    results = []
    template = None
    compile_error = None
    for ctx in contexts:
        now = datetime.datetime.strptime(ctx.pop("__now__", "2025-01-02"), "%Y-%m-%d")
        try:
            if template is None and compile_error is None:
                template = make_environment(now).from_string(source)
            if compile_error is not None:
                raise compile_error
            template.globals["strftime_now"] = lambda fmt, now=now: now.strftime(fmt)
            results.append({"ok": True, "text": template.render(**ctx)})
        except Exception as e:  # pylint: disable=broad-except
            if template is None:
                compile_error = e
            results.append({"ok": False, "error": "%s: %s" % (type(e).__name__, e)})
    sys.stdout.write(json.dumps(results, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
