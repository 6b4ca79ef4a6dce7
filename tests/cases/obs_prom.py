#!/usr/bin/env python3
"""A strict parser of the Prometheus text exposition format 0.0.4, and the
checks of dtrun --monitor's /metrics (tests/cases/obs_monitor*.sh).

    obs_prom.py parse URL [TOKEN]      print the samples as JSON, or fail
Every line is blank, a comment (# HELP name text / # TYPE name type / other
'# '), or a sample `name{label="value",...} value [timestamp]`; names and
label names valid; HELP and TYPE at most once per family and before its
samples; a family's samples contiguous; label values with only \\\\, \\" and
\\n escapes; values floats (NaN, +Inf, -Inf allowed); no duplicate sample
(name and label set).  Counters' samples end in _total."""
import json
import re
import sys
import urllib.request

NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
TYPES = {"counter", "gauge", "histogram", "summary", "untyped"}


class Bad(Exception):
    pass


def parse_value(text, where):
    if text in ("NaN", "+Inf", "-Inf"):
        return float(text.replace("Inf", "inf").replace("NaN", "nan"))
    if not re.fullmatch(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?", text):
        raise Bad(f"{where}: value {text!r} is not a float")
    return float(text)


def parse_labels(s, i, where):
    """s[i] == '{': returns (labels, index after '}')."""
    labels = {}
    i += 1
    while True:
        if s[i:i + 1] == "}":
            return labels, i + 1
        m = LABEL.match(s, i)
        if not m:
            raise Bad(f"{where}: bad label name at {s[i:i + 20]!r}")
        name = m.group(0)
        i = m.end()
        if s[i:i + 2] != '="':
            raise Bad(f"{where}: expected =\" after label {name}")
        i += 2
        value = []
        while True:
            if i >= len(s):
                raise Bad(f"{where}: unterminated label value")
            c = s[i]
            if c == "\\":
                esc = s[i + 1:i + 2]
                if esc not in ("\\", '"', "n"):
                    raise Bad(f"{where}: bad escape \\{esc} in a label value")
                value.append("\n" if esc == "n" else esc)
                i += 2
            elif c == '"':
                i += 1
                break
            else:
                value.append(c)
                i += 1
        if name in labels:
            raise Bad(f"{where}: label {name} twice")
        labels[name] = "".join(value)
        if s[i:i + 1] == ",":
            i += 1
        elif s[i:i + 1] != "}":
            raise Bad(f"{where}: expected , or }} after label {name}")


def parse(text):
    if text and not text.endswith("\n"):
        raise Bad("the exposition does not end with a newline")
    samples, help_, type_, done, seen = [], {}, {}, set(), set()
    current = None
    for no, line in enumerate(text.split("\n")[:-1], 1):
        where = f"line {no}"
        if line == "":
            continue
        if line.startswith("#"):
            parts = line.split(" ", 3)
            if len(parts) >= 3 and parts[1] in ("HELP", "TYPE"):
                kind, name = parts[1], parts[2]
                if not NAME.fullmatch(name):
                    raise Bad(f"{where}: bad metric name {name!r}")
                table = help_ if kind == "HELP" else type_
                if name in table:
                    raise Bad(f"{where}: a second {kind} for {name}")
                if name in done or name == current and any(s[0] == name for s in samples):
                    raise Bad(f"{where}: {kind} for {name} after its samples")
                if kind == "TYPE":
                    if len(parts) != 4 or parts[3] not in TYPES:
                        raise Bad(f"{where}: bad TYPE line {line!r}")
                elif len(parts) != 4 or not parts[3]:
                    raise Bad(f"{where}: HELP without text")
                table[name] = parts[3]
            elif not line.startswith("# ") and line != "#":
                raise Bad(f"{where}: a comment must start with '# ': {line!r}")
            continue
        m = NAME.match(line)
        if not m:
            raise Bad(f"{where}: bad sample line {line!r}")
        name, i, labels = m.group(0), m.end(), {}
        if line[i:i + 1] == "{":
            labels, i = parse_labels(line, i, where)
        rest = line[i:]
        if not rest.startswith(" "):
            raise Bad(f"{where}: expected a space before the value: {line!r}")
        fields = rest[1:].split(" ")
        if len(fields) not in (1, 2):
            raise Bad(f"{where}: expected 'value [timestamp]': {rest!r}")
        value = parse_value(fields[0], where)
        if len(fields) == 2 and not re.fullmatch(r"-?\d+", fields[1]):
            raise Bad(f"{where}: bad timestamp {fields[1]!r}")
        if name != current:
            if name in done:
                raise Bad(f"{where}: the samples of {name} are not together")
            if current:
                done.add(current)
            current = name
        if name not in type_:
            raise Bad(f"{where}: sample of {name} before (or without) its TYPE line")
        if type_[name] == "counter" and not name.endswith("_total"):
            raise Bad(f"{where}: counter {name} does not end in _total")
        key = (name, tuple(sorted(labels.items())))
        if key in seen:
            raise Bad(f"{where}: duplicate sample {key}")
        seen.add(key)
        samples.append((name, labels, value))
    for name in type_:
        if name not in help_:
            raise Bad(f"{name} has a TYPE but no HELP")
    return samples


def fetch(url, token=None):
    req = urllib.request.Request(url)
    if token:
        req.add_header("Authorization", "Bearer " + token)
    with urllib.request.urlopen(req, timeout=10) as r:
        ctype = r.headers.get("Content-Type", "")
        if not ctype.startswith("text/plain; version=0.0.4"):
            raise Bad(f"Content-Type {ctype!r}, not the text format 0.0.4's")
        return r.read().decode("utf-8")


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "parse":
        try:
            samples = parse(fetch(sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else None))
        except Bad as e:
            sys.exit(f"not valid Prometheus text format: {e}")
        print(json.dumps([[n, l, v] for n, l, v in samples]))
    elif len(sys.argv) == 2 and sys.argv[1] == "selftest":
        good = '# HELP a_total x\n# TYPE a_total counter\na_total{r="1",h="q\\"\\\\"} 3\n\n# HELP b y\n# TYPE b gauge\nb -Inf\n'
        assert parse(good)[0] == ("a_total", {"r": "1", "h": 'q"\\'}, 3.0)
        for bad in ['b 1\n', '# TYPE b gauge\nb 1\n', '# HELP b y\n# TYPE b gauge\nb{x="1} 2\n',
                    '# HELP b y\n# TYPE b gauge\nb one\n', '# HELP b y\n# TYPE b gauge\nb 1\nb 1\n',
                    '# HELP c y\n# TYPE c counter\nc 1\n', '# HELP b y\n# TYPE b gauge\nb{x="\\t"} 1\n',
                    '# HELP b y\n# TYPE b gauge\nb 1', '#HELP b y\n', '# HELP 1b y\n',
                    '# HELP b y\n# TYPE b gauge\n# HELP c y\n# TYPE c gauge\nb 1\nc 1\nb{x="2"} 1\n']:
            try:
                parse(bad)
            except Bad:
                continue
            sys.exit(f"the parser accepted {bad!r}")
        print("parser self-test ok")
    else:
        sys.exit(__doc__)
