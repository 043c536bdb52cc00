"""GPU models as nodes name them: how much memory one GPU of a node has, and which words name its model.

Pure: reads a node's labels, no I/O. docs/serving.md ("Sizing by GPU memory", "GPU models") explains
the rules for users. Read, in order, the first that says how much memory a GPU has:

1. NVIDIA GPU feature discovery's `nvidia.com/gpu.memory` (MiB per GPU: what the driver reports, e.g.
   81920 for an A100 80GB, 23028 for an A10G);
2. the model in `nvidia.com/gpu.product` (`NVIDIA-A100-SXM4-80GB`, `NVIDIA-A10G`), then in gpuctl's
   `runwhere.ai/gpu-type` (or the earlier `gpuType`): a size written in it (`A10-24G`, `A100-80GB`) is
   taken at its word, else the model's memory from MODELS. A name of several sizes (`A100`: 40 or 80
   GB; `V100`: 16 or 32) says nothing.

GB in a model's name is counted as GiB, as NVIDIA's MIG profile names are (gpuctl.domain.sharing:
a 1g.10gb instance holds 10Gi).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from gpuctl.constants import GPU_TYPE_LABEL_KEYS
from gpuctl.domain.sharing import MEMORY_LABEL, PRODUCT_LABEL

GIB = 1024**3
MIB = 1024**2
# Where a node's GPU model is named, in the order read (GFD's product first: the driver's own words).
MODEL_KEYS = (PRODUCT_LABEL, *GPU_TYPE_LABEL_KEYS)


@dataclass(frozen=True)
class GpuModel:
    """A GPU model: gpuctl's short name, the memory of one GPU (GiB) and the words that name it in a
    product label (each a sequence of tokens, upper case: ("A100", "80GB") matches
    NVIDIA-A100-SXM4-80GB)."""

    name: str
    memory_gib: int
    names: tuple[tuple[str, ...], ...]


def _m(name: str, gib: int, *names: str) -> GpuModel:
    return GpuModel(name, gib, tuple(tuple(n.split()) for n in (name.replace("-", " "), *names)))


# Data-centre and workstation GPUs whose memory one name gives (NVIDIA's data sheets). Several sizes
# under one name (A100 40/80 GB, V100 16/32, H100 80/94 NVL) are listed only with the size or variant.
MODELS: tuple[GpuModel, ...] = (
    _m("T4", 16, "TESLA T4"),
    _m("V100-16GB", 16, "V100 16GB", "V100 SXM2 16GB", "V100 PCIE 16GB"),
    _m("V100-32GB", 32, "V100 32GB", "V100 SXM2 32GB", "V100 PCIE 32GB", "V100S"),
    _m("A2", 16),
    _m("A10", 24),
    _m("A10G", 24),
    _m("A16", 16),
    _m("A30", 24),
    _m("A40", 48),
    _m("A100-40GB", 40, "A100 40GB", "A100 SXM4 40GB", "A100 PCIE 40GB"),
    _m("A100-80GB", 80, "A100 80GB", "A100 SXM4 80GB", "A100 PCIE 80GB", "A100 80G"),
    _m("L4", 24),
    _m("L40", 48),
    _m("L40S", 48),
    _m("H100-80GB", 80, "H100 80GB", "H100 SXM5 80GB", "H100 PCIE", "H100 SXM", "H800"),
    _m("H100-NVL", 94, "H100 NVL"),
    _m("H20", 96),
    _m("H200", 141, "H200 141GB", "H200 NVL"),
    _m("B200", 180),
    _m("GB200", 186),
    _m("RTX-4090", 24, "RTX4090", "GEFORCE RTX 4090"),
    _m("RTX-3090", 24, "RTX3090", "GEFORCE RTX 3090"),
    _m("RTX-A4000", 16, "RTX A4000"),
    _m("RTX-A5000", 24, "RTX A5000"),
    _m("RTX-A6000", 48, "RTX A6000"),
    _m("RTX-6000-ADA", 48, "RTX 6000 ADA"),
)
# Names of several memory sizes: said in the refusal, so the fix names the sizes to choose from.
AMBIGUOUS: Mapping[str, str] = {"A100": "40 or 80 GB", "V100": "16 or 32 GB", "H100": "80 or 94 GB"}

_SIZE = re.compile(r"^(\d+)(G|GB|GI|GIB)$")


def tokens(text: str) -> tuple[str, ...]:
    """A model name's words, upper case: `NVIDIA-A100-SXM4-80GB` -> NVIDIA A100 SXM4 80GB; a size is
    written one way (`80G`, `80gb`, `80Gi` -> 80GB)."""
    out = []
    for t in re.split(r"[^A-Za-z0-9.]+", text.upper()):
        m = _SIZE.match(t)
        out.append(f"{m.group(1)}GB" if m else t)
    return tuple(t for t in out if t)


def _contains(words: tuple[str, ...], part: tuple[str, ...]) -> bool:
    """`part` occurs in `words`, as consecutive words or glued together (RTX 4090 in RTX4090 and back)."""
    n = len(part)
    if any(words[i : i + n] == part for i in range(len(words) - n + 1)):
        return True
    glued = "".join(part)
    return any("".join(words[i:j]) == glued for i in range(len(words)) for j in range(i + 1, len(words) + 1))


def model_named(text: str | None) -> GpuModel | None:
    """The model a product or gpu-type label names (the longest name that matches: A10G, not A10)."""
    if not text:
        return None
    words = tokens(text)
    found = [(len("".join(n)), m) for m in MODELS for n in m.names if _contains(words, n)]
    return max(found, key=lambda f: f[0])[1] if found else None


def named_size(text: str | None) -> int | None:
    """Memory per GPU (bytes) a name states (`A10-24G`, `A100-SXM4-80GB`): the one size in it, if any."""
    sizes = {int(t[:-2]) for t in tokens(text or "") if t.endswith("GB") and t[:-2].isdigit()}
    return sizes.pop() * GIB if len(sizes) == 1 else None


@dataclass(frozen=True)
class NodeGpu:
    """What one node's labels say about its GPUs: memory per GPU (bytes, None: unknown), the model's
    name for people, the label key memory was read from ("" when unknown), and the names of its model
    as words (its labels', the known model's, its size: what placementConstraints.nodeTypes matches)."""

    memory: int | None
    model: str
    source: str
    names: tuple[tuple[str, ...], ...]


def node_gpu(labels: Mapping[str, str]) -> NodeGpu:
    """The module docstring's order, over one node's labels."""
    texts = [labels[k] for k in MODEL_KEYS if labels.get(k)]
    model = next((m for m in map(model_named, texts) if m is not None), None)
    names = [tokens(t) for t in texts]
    if model is not None:
        names += [*model.names, tokens(model.name), (f"{model.memory_gib}GB",)]
    memory, source = None, ""
    mib = labels.get(MEMORY_LABEL, "")
    if mib.isdigit() and int(mib) > 0:
        memory, source = int(mib) * MIB, MEMORY_LABEL
    else:
        for key in MODEL_KEYS:
            text = labels.get(key)
            said = named_size(text)
            if said is None and model is not None and model_named(text) is model:
                said = model.memory_gib * GIB
            if said:
                memory, source = said, key
                break
    if memory:
        names.append((f"{round(memory / GIB)}GB",))
    shown = model.name if model else (texts[0] if texts else "")
    return NodeGpu(memory, shown, source, tuple(dict.fromkeys(names)))


def ambiguous_name(labels: Mapping[str, str]) -> str | None:
    """Why a node's model name gives no memory: "A100 is made with 40 or 80 GB", else None."""
    for key in MODEL_KEYS:
        words = tokens(labels.get(key, ""))
        for name, sizes in AMBIGUOUS.items():
            if name in words:
                return f"{name} is made with {sizes}"
    return None


def names_model(node_type: str, gpu: NodeGpu) -> bool:
    """A placementConstraints.nodeTypes entry names this node's GPU model: each of its words is a word of
    one of the model's names (glued or not: rtx4090 and RTX-4090), case-insensitive. a10g is an A10G, not
    an A10; a100 any A100; a100-80gb an A100 of 80 GB."""
    want = tokens(node_type)
    return bool(want) and all(any(_contains(name, (w,)) for name in gpu.names) for w in want)
