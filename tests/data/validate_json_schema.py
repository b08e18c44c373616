#!/usr/bin/env python3
"""Oracle for tests/test_json_schema.cpp: validates generated texts against their JSON Schemas.

Reads a JSON array of {"schema": ..., "text": "..."} from the file named on the command line
and prints a JSON array with one entry per item: null when the text parses as JSON and is valid
against the schema (Draft 2020-12, with the format checker: date, date-time, time, uuid), else
the error message. Uses Debian's python3-jsonschema.
"""
import json
import sys

import jsonschema


def check(item):
    try:
        value = json.loads(item["text"])
    except ValueError as e:
        return "not JSON: %s" % e
    validator = jsonschema.Draft202012Validator(
        item["schema"], format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
    errors = sorted(validator.iter_errors(value), key=lambda e: list(e.path))
    return errors[0].message if errors else None


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        items = json.load(f)
    print(json.dumps([check(item) for item in items]))


if __name__ == "__main__":
    main()
