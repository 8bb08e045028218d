"""The records' bodies in report.html, packed to be drawn when opened.

Every record's body (each run's result: its error, why it failed, its transcript) was HTML in the page,
parsed into the DOM at load even while closed: 10.1 MB for 1,800 results, 4 s before a deep link opened.
Here the bodies are JSON arrays of HTML strings, gzip-compressed and base64-encoded, CHUNK records per
<script> (raw text the browser does not parse), and the page's script inflates a chunk the first time one
of its records opens (the browser's own DecompressionStream), or all of them for a text search. The page
stays one self-contained file; a record's body needs JavaScript to show.
"""

from __future__ import annotations

import base64
import gzip
import json

CHUNK = 50  # records per compressed chunk: opening one record inflates ~200 results' bodies, a few ms


def pack(bodies: list[str]) -> str:
    """The bodies, in record order, as compressed chunks (mtime 0: the same results give the same page)."""
    out = []
    for start in range(0, len(bodies), CHUNK):
        data = json.dumps(bodies[start : start + CHUNK]).encode()
        packed = base64.b64encode(gzip.compress(data, compresslevel=6, mtime=0)).decode()
        out.append(f'<script type="application/gzip" class="bodies">{packed}</script>')
    return "".join(out)


def unpack(page: str) -> list[str]:
    """The bodies back from a page (tests and tools: what the browser's script does)."""
    out: list[str] = []
    marker = '<script type="application/gzip" class="bodies">'
    for part in page.split(marker)[1:]:
        out += json.loads(gzip.decompress(base64.b64decode(part.split("</script>", 1)[0])))
    return out


# The loader: `body(n)` resolves to record n's HTML; `texts(rows)` to every record's text (its row's, the last
# item of each of `rows`, and its body's), lower-cased, for search.
LOADER = f"""const CHUNK = {CHUNK};
const packed = [...document.querySelectorAll('script.bodies')];
const inflated = new Map();
function inflate(k) {{
  if (!inflated.has(k)) {{
    const bin = atob(packed[k].textContent);
    const bytes = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
    const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream('gzip'));
    inflated.set(k, new Response(stream).text().then(JSON.parse));
  }}
  return inflated.get(k);
}}
async function body(n) {{ return (await inflate(Math.floor(n / CHUNK)))[n % CHUNK]; }}
let searchable = null;
function texts(rows) {{
  const strip = h => h.replace(/<[^>]*>/g, ' ').replace(/&lt;/g, '<').replace(/&gt;/g, '>')
    .replace(/&quot;/g, '"').replace(/&#x27;/g, "'").replace(/&amp;/g, '&').toLowerCase();
  searchable = searchable || Promise.all(packed.map((_, k) => inflate(k)))
    .then(chunks => chunks.flat().map((b, n) => strip(rows[n][rows[n].length - 1]) + ' ' + strip(b)));
  return searchable;
}}
"""
