"""`python -m ddd export-generate DIR`: a folder that transformers loads as `custom_generate=DIR` (with
`trust_remote_code=True`) and that can be pushed to the Hub as it is: `custom_generate/generate.py`, the engine
modules it imports, `custom_generate/requirements.txt` and a README card naming the methods and settings.

The engine travels as a copy of this package's modules made at export, not as a requirement on the package:
the package is not on the package index, so a requirement would leave a Hub folder loadable on no other
machine, while the copy needs only torch and transformers and keeps the folder decoding exactly as the engine
that wrote it. transformers copies generate.py and, following its relative imports, the modules beside it.
"""
from __future__ import annotations

import ast
import shutil
from pathlib import Path

from .settings import METHOD_DECLARATIONS, METHODS

PACKAGE = Path(__file__).resolve().parent
ENTRY = "hf"  # the module whose generate_folder the folder's generate.py runs
# What the copied engine needs: transformers 5's generate() (ddd.hf follows its custom_generate contract), the
# torch the test suite passed on down to ZeroGPU's 2.11, safetensors for head files.
REQUIREMENTS = ("torch>=2.11", "transformers>=5.24,<6", "safetensors>=0.4")
GENERATE_PY = '''"""custom_generate for transformers: EAGLE, EAGLE-2, Dynamic Depth Decoding and the cost rule (README.md).
The modules beside this file are DDD Explorer's engine, copied at export (python -m ddd export-generate)."""
from .{entry} import generate_folder as generate
'''


class ExportError(Exception):
    """The folder cannot be written; the message says why."""


def engine_modules(entry: str = ENTRY) -> list[str]:
    """The package's modules `entry` imports, directly or through each other (relative imports only: the engine
    imports no other part of the project), `entry` included, sorted."""
    found: set[str] = set()
    todo = [entry]
    while todo:
        name = todo.pop()
        if name in found:
            continue
        found.add(name)
        tree = ast.parse((PACKAGE / f"{name}.py").read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level:
                if node.level != 1 or not node.module or "." in node.module:
                    raise ExportError(f"ddd/{name}.py imports from outside the flat engine package ({ast.unparse(node)}).")
                todo.append(node.module)
    return sorted(found)


def card() -> str:
    """The folder's README: what it does, how to call it, the methods and their settings (from ddd.settings)."""
    rows = "\n".join(f"| `{method}` | " + ("; ".join(f"`{s.name}`: {s.describe()}" for s in METHOD_DECLARATIONS[method])
                                          or "none") + " |" for method in METHODS)
    return f"""---
library_name: transformers
tags:
  - custom_generate
---

# Dynamic Depth Decoding for `model.generate()`

Speculative decoding with an EAGLE draft head inside transformers' own `generate()`: EAGLE (static tree),
EAGLE-2 (dynamic tree), **DDD** (EAGLE-2 whose depth follows the draft's own confidence, arXiv 2409.00142) and
a cost-aware depth rule. Greedy output is plain greedy decoding's, token for token; sampled output keeps plain
sampling's distribution. Llama, Mistral and Qwen2 targets, with an EAGLE-1/2 or EAGLE-3 head.

```python
from transformers import AutoModelForCausalLM, AutoTokenizer

tokenizer = AutoTokenizer.from_pretrained(MODEL)
model = AutoModelForCausalLM.from_pretrained(MODEL)
inputs = tokenizer("Why is the sky blue?", return_tensors="pt")
out = model.generate(**inputs, custom_generate=THIS_FOLDER_OR_REPO, trust_remote_code=True,
                     head=HEAD_DIR_OR_HUB_ID, method="ddd", threshold=-0.3, max_new_tokens=64,
                     return_dict_in_generate=True)
print(tokenizer.decode(out.sequences[0]), out.trace.summary["tau"])
```

`head` is a head directory, a hub id of an EAGLE / EAGLE-3 head, or a loaded head. `do_sample`,
`temperature`, `top_k`, `top_p`, `max_new_tokens`, the eos tokens and `streamer=` work as in `generate()`;
one sequence at a time. With `return_dict_in_generate=True` the output's `trace` holds every step: the drafted
tree, the depth chosen and why, the accepted path and the timings.

| method | settings (keyword arguments of `generate()`) |
|---|---|
{rows}

Requirements: {", ".join(REQUIREMENTS)} (`custom_generate/requirements.txt`). The code in `custom_generate/` is
DDD Explorer's engine, copied by `python -m ddd export-generate`.
"""


def export_generate(directory: str | Path) -> Path:
    """Write the folder into `directory` (new or empty); returns it."""
    path = Path(directory).expanduser()
    if path.exists() and not path.is_dir():
        raise ExportError(f"{path} is a file; give a new or empty folder.")
    if path.is_dir() and any(path.iterdir()):
        raise ExportError(f"{path} is not empty; give a new or empty folder (the export writes the whole folder).")
    code = path / "custom_generate"
    code.mkdir(parents=True, exist_ok=True)
    for name in engine_modules():
        shutil.copyfile(PACKAGE / f"{name}.py", code / f"{name}.py")
    (code / "generate.py").write_text(GENERATE_PY.format(entry=ENTRY), encoding="utf-8")
    (code / "requirements.txt").write_text("\n".join(REQUIREMENTS) + "\n", encoding="utf-8")
    (path / "README.md").write_text(card(), encoding="utf-8")
    return path
