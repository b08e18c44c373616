#!/usr/bin/python3
"""Renders a Jinja chat template the way Hugging Face transformers' apply_chat_template does.

This is the test oracle for kvrun's chat-template formatters (tests/test_chat_template.cpp).
It needs Debian's python3-jinja2; run it with /usr/bin/python3.

Usage: render_chat_template.py TEMPLATE.jinja REQUEST.json

REQUEST.json is an object with:
  messages               list of {"role": ..., "content": ...}
  add_generation_prompt  bool
  bos_token, eos_token   strings (special tokens passed to the template)
  now                    optional "YYYY-MM-DD": the date strftime_now() formats (default: today)

On success the rendered prompt is written to stdout byte for byte and the exit status is 0.
When the template raises (raise_exception or any other error while rendering) one line
"TEMPLATE_ERROR: <message>" is written to stdout and the exit status is 3.

REQUEST.json may also be a list of such objects (one template, many conversations: one Python
start instead of one per conversation). Then stdout is a JSON list with, per request,
{"text": rendered} or {"error": "<type>: <message>"}, and the exit status is 0.
"""

import datetime
import json
import sys

try:
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment
except ImportError:  # the test skips on exit status 4
    sys.stderr.write("jinja2 is not installed (apt-get install python3-jinja2)\n")
    sys.exit(4)


class GenerationTracker(jinja2.ext.Extension):
    """Accepts `{% generation %}...{% endgeneration %}` blocks and renders their body as is."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(
            lineno)

    def _render(self, caller):
        return caller()


def make_environment(now, generation=True):
    """A sandboxed environment with the globals and filters transformers provides; with
    `generation`, the {% generation %} tag of assistant-mask templates too."""

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(fmt):
        return now.strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=([GenerationTracker] if generation else []) +
                                        [jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render(source, request):
    """The rendered prompt of one request; raises what the template raises."""
    now = datetime.datetime.now()
    if request.get("now"):
        now = datetime.datetime.strptime(request["now"], "%Y-%m-%d")
    template = make_environment(now).from_string(source)
    return template.render(messages=request["messages"], tools=None, documents=None,
                           add_generation_prompt=bool(request["add_generation_prompt"]),
                           bos_token=request.get("bos_token", ""),
                           eos_token=request.get("eos_token", ""))


def main():
    if len(sys.argv) != 3:
        sys.stderr.write(__doc__)
        return 2
    with open(sys.argv[1], encoding="utf-8") as f:
        source = f.read()
    with open(sys.argv[2], encoding="utf-8") as f:
        request = json.load(f)
    if isinstance(request, list):
        results = []
        for r in request:
            try:
                results.append({"text": render(source, r)})
            except Exception as e:  # a failure of the template itself, reported per request
                results.append({"error": "%s: %s" % (type(e).__name__, e)})
        sys.stdout.write(json.dumps(results))
        return 0
    try:
        text = render(source, request)
    except Exception as e:  # any failure of the template itself is reported, not a crash
        sys.stdout.write("TEMPLATE_ERROR: %s: %s\n" % (type(e).__name__, e))
        return 3
    sys.stdout.buffer.write(text.encode("utf-8"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
