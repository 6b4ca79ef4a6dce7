"""The checks every self-contained HTML page dtrain writes must pass (dtrain
report, dtrain timeline): it parses, its elements nest (every end tag closes
the innermost open element, none is left open), it loads nothing (no src or
href) and runs nothing (no script).  A test subclasses Page for what its page
holds (start_tag, end_tag) and calls check_page:

    sys.path.insert(0, "tests/cases"); from html_page import Page, check_page
    class P(Page):
        def start_tag(self, tag, a): ...   # a: the attributes as a dict
    p = check_page("run.html", P, required={"svg"})

Any failure exits naming the page and the problem."""
import sys
from html.parser import HTMLParser

# HTML's void elements: never an end tag.  SVG's shapes are not among them:
# the pages close them (<rect .../>, or <rect ...><title>...</title></rect>).
VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


class Page(HTMLParser):
    def __init__(self, path):
        super().__init__()
        self.path, self.stack, self.tags = path, [], set()

    def fail(self, why):
        sys.exit(f"{self.path}: {why}")

    # what a test looks at: every start tag (a: its attributes as a dict), every end tag
    def start_tag(self, tag, a):
        pass

    def end_tag(self, tag):
        pass

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.add(tag)
        for k in ("src", "href"):
            if k in a:
                self.fail(f"the page loads {a[k]}: not self-contained")
        self.start_tag(tag, a)
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)
        if tag not in VOID:
            self.stack.pop()
            self.end_tag(tag)

    def handle_endtag(self, tag):
        if tag in VOID:
            return
        if not self.stack or self.stack[-1] != tag:
            self.fail(f"</{tag}> closes {self.stack[-1:]}: not well nested")
        self.stack.pop()
        self.end_tag(tag)


def check_page(path, cls=Page, required=()):
    """Parse the page at path with cls (a Page); check it nests, holds no
    script and has every tag in required; returns the parser."""
    p = cls(path)
    with open(path) as f:
        p.feed(f.read())
    p.close()
    missing = set(required) - p.tags
    if p.stack or "script" in p.tags or missing:
        p.fail(f"unclosed {p.stack}, tags {sorted(p.tags)}" + (f", no {sorted(missing)}" if missing else ""))
    return p


if __name__ == "__main__":  # self-test: what it must refuse
    import os
    import tempfile

    def refused(text):
        with tempfile.NamedTemporaryFile("w", suffix=".html", delete=False) as f:
            f.write(text)
        try:
            check_page(f.name, required={"svg"})
        except SystemExit:
            return True
        finally:
            os.unlink(f.name)
        return False

    good = "<!doctype html><html><head><meta charset=utf-8></head><body><svg><rect x=1></rect><line/></svg></body></html>"
    assert not refused(good), "a good page was refused"
    for bad in (good.replace("</body>", ""), good.replace("<svg>", "<svg><g>"), good.replace("<body>", "<body><script>x</script>"),
                good.replace("<rect", "<img src=x.png><rect"), good.replace("<head>", "<head><link href=a.css>"),
                good.replace("<svg>", "<div>").replace("</svg>", "</div>"), good.replace("<line/>", "<line>"), "<p></div>"):
        assert refused(bad), f"accepted: {bad}"
    print("html_page self-test ok")
