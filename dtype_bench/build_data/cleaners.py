"""Documentation files to prose, one converter a kind (``CONVERTERS``): reStructuredText, Markdown,
plain text, HTML (the standard library's ``html.parser``) and POD; ``kind_of`` tells a file's kind by
its suffix, and ``english_share`` how much of a document is English prose."""
from __future__ import annotations

import re
from html.parser import HTMLParser
from typing import Iterable


_RST_DROP = re.compile(r"^\s*\.\. |^\s+:[\w -]+:(\s|$)|^\s*([=\-~^\"'`#*+<>_])\2{3,}\s*$")
"""reStructuredText markup lines: directives, comments and labels (``.. x::``), directive
options (``   :maxdepth: 2``; not prose opening with a role, ``:c:func:`x` does``) and
section under/overlines."""


# ---- LM text from documentation packages ------------------------
def clean_rst(text: str) -> str:
    """reStructuredText as prose: markup-only lines dropped, runs of blank lines made one."""
    kept = [line.rstrip() for line in text.splitlines() if not _RST_DROP.match(line)]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(kept)).strip()


def _blank_runs(lines: Iterable[str]) -> str:
    return re.sub(r"\n{3,}", "\n\n", "\n".join(line.rstrip() for line in lines)).strip()


_RULE_LINE = re.compile(r"^\s*([=\-~^*#_+.])\1{3,}\s*$")


_MD_FENCE = re.compile(r"^\s*(```|~~~)")


def clean_text(text: str) -> str:
    """Plain text as prose: form feeds and rule lines (``=====``, ``-----``) dropped, trailing
    blanks cut, runs of blank lines made one."""
    return _blank_runs(line for line in text.replace("\f", "\n").splitlines() if not _RULE_LINE.match(line))


def clean_markdown(text: str) -> str:
    """Markdown as prose: fenced code blocks, table rule rows, HTML-only lines and images dropped;
    heading marks, emphasis and link targets taken off (a link keeps its text, inline code its
    content); then ``clean_text``."""
    kept, fenced = [], False
    for line in text.splitlines():
        if _MD_FENCE.match(line):
            fenced = not fenced
            continue
        if fenced or re.match(r"^\s*\|?\s*:?-{3,}", line) or re.match(r"^\s*<[^>]+>\s*$", line):
            continue
        line = re.sub(r"!\[[^\]]*\]\([^)]*\)", "", line)
        line = re.sub(r"\[([^\]]*)\]\([^)]*\)|\[([^\]]*)\]\[[^\]]*\]", lambda m: m.group(1) or m.group(2) or "", line)
        line = re.sub(r"^\s{0,3}#{1,6}\s+|\s+#+\s*$", "", line)
        line = re.sub(r"(\*\*|__|`|\*)(.+?)\1", r"\2", line)
        kept.append(line)
    return clean_text("\n".join(kept))


_POD_CODE = re.compile(r"([A-Z])<(?:<+\s(.*?)\s>+|([^<>]*))>", re.S)


def _pod_inline(text: str) -> str:
    """POD formatting codes as their text: ``L<text|target>`` -> text, ``E<gt>`` -> >, ``X<>``
    and ``Z<>`` dropped, the others (``B<> I<> C<> F<> S<>``) their content; innermost first."""
    escapes = {"lt": "<", "gt": ">", "verbar": "|", "sol": "/"}

    def one(m: re.Match) -> str:
        code, body = m.group(1), m.group(2) if m.group(2) is not None else m.group(3)
        if code in "XZ":
            return ""
        if code == "E":
            return escapes.get(body, "")
        if code == "L":
            body = body.split("|")[0] if "|" in body else body.split("/")[-1].strip('"')
        return body
    for _ in range(8):
        text, n = _POD_CODE.subn(one, text)
        if not n:
            break
    return text


def clean_pod(text: str) -> str:
    """Perl POD as prose: command paragraphs (``=head1 X`` keeps ``X``, ``=item X`` keeps ``X``;
    ``=over``, ``=back``, ``=cut``, ``=pod``, ``=for`` and ``=begin``/``=end`` blocks dropped),
    verbatim (indented, code) paragraphs dropped, formatting codes reduced to their text. Text
    outside ``=pod``..``=cut`` (Perl code in a ``.pm``) is left out."""
    kept, in_pod, in_begin = [], not re.match(r"\s*(use|package|#!|#)", text), False
    for para in re.split(r"\n\s*\n", text):
        head = para.lstrip("\n")
        if head.startswith("="):
            cmd, _, rest = head[1:].partition(" ")
            cmd = cmd.split("\n")[0]
            in_pod = cmd != "cut"
            if cmd == "begin":
                in_begin = True
            elif cmd == "end":
                in_begin = False
            elif cmd.startswith("head") or cmd == "item":
                rest = rest.strip()
                if rest and rest not in ("*", "-") and not rest.rstrip(".").isdigit():
                    kept.append(_pod_inline(rest))
            continue
        if in_pod and not in_begin and head and not head[0].isspace():
            kept.append(_pod_inline(head.rstrip()))
    return _blank_runs("\n\n".join(kept).splitlines())


_HTML_SKIP = {"script", "style", "pre", "nav", "header", "footer", "aside", "head", "title",
              "noscript", "svg", "math", "button", "form", "select", "textarea", "template"}
"""Elements left out with all they hold: scripts, code blocks (``pre``), navigation, forms. Inline
``code`` is kept: a sentence that names an identifier reads as a sentence without a gap."""


_HTML_VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


_HTML_BLOCK = {"p", "div", "section", "article", "main", "blockquote", "li", "ul", "ol", "dl", "dt", "dd",
               "table", "tr", "td", "th", "caption", "figure", "figcaption", "br", "hr", "body",
               "h1", "h2", "h3", "h4", "h5", "h6"}


_HTML_NAV = re.compile(r"(^|[\s_-])(nav|navbar|navigation|menu|sidebar|sphinxsidebar|breadcrumbs?|footer|header|"
                       r"related|toc|toctree|search|headerlink|permalink|skip|highlight|sourcecode|example-wrap|"
                       r"tocset|navfooter|navheader|refnav|versionmodified-note)($|[\s_-])", re.I)


HTML_MIN_WORDS = 4
"""A block of an HTML page (not a heading) with fewer words is left out: navigation links,
buttons, labels."""


_HTML_CLASS_SKIP = {"div", "section", "span", "ul", "ol", "dl", "table", "a", "form"}
"""Elements skipped where their class, id or role is navigation-like (``_HTML_NAV``): those whose
end tag HTML requires, so that a skip always ends."""


class _HtmlProse(HTMLParser):
    """``html.parser`` handler: text of paragraphs, headings, list items and table cells, each
    block one paragraph; script, style, code blocks (``pre``, a ``highlight`` class) and
    navigation-like elements (``nav``, ``header``, ``footer``, ``aside``, or a class, id or role
    naming navigation, a menu, a sidebar, a table of contents) skipped with all they hold."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.blocks, self.buf, self.skip, self.heading = [], [], [], False

    def flush(self):
        text = " ".join("".join(self.buf).split())
        self.buf = []
        if text and (self.heading or len(text.split()) >= HTML_MIN_WORDS):
            self.blocks.append(text)
        self.heading = False

    def handle_starttag(self, tag, attrs):
        if tag in _HTML_VOID:
            if tag in ("br", "hr") and not self.skip:
                self.flush()
            return
        if self.skip:
            if tag == self.skip[0]:
                self.skip.append(tag)
            return
        names = " ".join(v or "" for k, v in attrs if k in ("class", "id", "role"))
        if tag in _HTML_SKIP or (tag in _HTML_CLASS_SKIP and names and _HTML_NAV.search(names)):
            self.skip = [tag]
            return
        if tag in _HTML_BLOCK:
            self.flush()
            self.heading = tag in ("h1", "h2", "h3", "h4", "h5", "h6")

    def handle_endtag(self, tag):
        if self.skip:
            if tag == self.skip[0]:
                self.skip.pop()
            return
        if tag in _HTML_BLOCK:
            self.heading = self.heading and tag[0] == "h"
            self.flush()

    def handle_data(self, data):
        if not self.skip:
            self.buf.append(data)


def clean_html(text: str) -> str:
    """HTML as prose (``_HtmlProse``): one paragraph a block, blank lines between."""
    parser = _HtmlProse()
    parser.feed(text)
    parser.close()
    parser.flush()
    return "\n\n".join(parser.blocks)


CONVERTERS = {"rst": clean_rst, "md": clean_markdown, "txt": clean_text, "html": clean_html, "pod": clean_pod}


SUFFIXES = {".rst": "rst", ".rest": "rst", ".md": "md", ".markdown": "md", ".txt": "txt", ".text": "txt",
            ".html": "html", ".htm": "html", ".xhtml": "html", ".pod": "pod"}
"""A file's kind from its suffix (case ignored; ``.gz`` taken off first)."""


KIND_ORDER = ("html", "rst", "md", "pod", "txt")
"""Where one package ships a document in two kinds at one path (``git-add.html`` beside
``git-add.txt``), the first of this order is read."""


_ENGLISH = frozenset("the of and to a in is that for it as with be on by this are or not an from at can which "
                     "if when you its will".split())


def english_share(text: str) -> float:
    """Share of a text's words (runs of letters, any script) that are common English function
    words (``_ENGLISH``): ~0.3 for English prose, under 0.1 for other languages, code and tables."""
    words = re.findall(r"[^\W\d_]+", text)
    return sum(w.lower() in _ENGLISH for w in words) / len(words) if words else 0.0


def kind_of(path: str) -> str | None:
    """The converter kind of a file (``SUFFIXES``), or None."""
    name = path.lower().removesuffix(".gz").rsplit("/", 1)[-1]
    return SUFFIXES.get("." + name.rsplit(".", 1)[-1]) if "." in name else None
