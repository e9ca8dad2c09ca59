"""limits.plotting.preload: matplotlib imported on a daemon thread while a run computes."""

import subprocess
import sys


def test_preload_imports_pyplot_with_agg_on_one_thread_and_figures_still_save(tmp_path):
  # A fresh interpreter (matplotlib may already be imported in the test process): after
  # preload() the import finishes on its own thread (named, started once however often it is
  # called), the backend is Agg, and a figure saved afterwards is a PNG.
  code = f"""
import sys, threading, time
from limits import plotting
assert "matplotlib.pyplot" not in sys.modules
plotting.preload(); plotting.preload()
names = [t.name for t in threading.enumerate() if t.name == "pyplot-preload"]
assert len(names) <= 1, names
for _ in range(600):
    if "matplotlib.pyplot" in sys.modules and not any(
            t.name == "pyplot-preload" for t in threading.enumerate()):
        break
    time.sleep(0.05)
else:
    raise SystemExit("preload did not finish")
import matplotlib
assert matplotlib.get_backend().lower() == "agg", matplotlib.get_backend()
plt = plotting.pyplot()
fig, ax = plt.subplots()
ax.plot([0, 1], [1, 0])
path = plotting.save(fig, {str(tmp_path / 'f.png')!r})
assert open(path, "rb").read(8) == b"\\x89PNG\\r\\n\\x1a\\n"
print("ok")
"""
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
  assert out.returncode == 0, out.stderr[-2000:]
  assert out.stdout.strip().endswith("ok")
