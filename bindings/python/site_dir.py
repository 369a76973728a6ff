"""site_dir.py PREFIX - prints the entry of this interpreter's sys.path under PREFIX where
packages go (site-packages or dist-packages), or nothing. Run by meson at configure time."""
import sys

prefix = sys.argv[1].rstrip("/") + "/"
hits = [p for p in sys.path
        if p.startswith(prefix) and p.endswith(("dist-packages", "site-packages"))]
print(hits[0] if hits else "")
