"""What a ZeroGPU Space holds: the pairs it offers (the one it races first, then those that fit beside it), what
their build downloads, the start-up they need, and the race it opens on (docs/deploy.md)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from types import SimpleNamespace

from ddd.bench.projection import ZEROGPU, project
from ddd.catalog import HEADROOM, PAIRS, ModelPair, parameter_count, target_size
from ddd.models import DEFAULT_HUB_ID

from .gputime import XLARGE_BYTES, SpaceRace, call_start_s, shows_effect
from .models import ZERO_GPU_BYTES


# The files a load reads, where a repository holds more (the Llama repositories keep a second copy of the weights
# in original/, another 16 GB); the others are downloaded whole. Loading goes through the hub cache, where the
# build puts these.
_LLAMA3_FILES = ",".join(["config.json", "generation_config.json", "model.safetensors.index.json",
                          *(f"model-0000{i}-of-00004.safetensors" for i in range(1, 5)),
                          "special_tokens_map.json", "tokenizer.json", "tokenizer_config.json"])
TARGET_FILES = {
    DEFAULT_HUB_ID: "config.json,generation_config.json,model.safetensors,special_tokens_map.json,tokenizer.json,"
                    "tokenizer_config.json",
    "meta-llama/Meta-Llama-3-8B-Instruct": _LLAMA3_FILES,
    "meta-llama/Llama-3.1-8B-Instruct": _LLAMA3_FILES,
}
# Start-up budget per pair, assumed rather than measured (no ZeroGPU here): the weights read from the Space's disk at
# a pessimistic 100 MB/s, then two short races and the measured preset (explorer.racing.time_start_up), 3 minutes;
# twice that, for a slow start, and at least ZeroGPU's default of 30 minutes.
READ_BYTES_PER_S = 100 * 10**6
TIMING_S = 180


@dataclass(frozen=True)
class SpacePair:
    """A pair a ZeroGPU Space offers: what it downloads at build time and what it takes."""

    label: str
    target: str
    head: str | None  # None: the shipped head, which comes with the Space's files
    nbytes: int  # 16-bit weights, target and head: on disk, and in the GPU's memory (float16)

    def preload(self) -> list[str]:
        """Its front-matter entries: "repo_id" (every file) or "repo_id file1,file2"."""
        files = TARGET_FILES.get(self.target)
        return [f"{self.target} {files}" if files else self.target, *([self.head] if self.head else [])]

    def start_up_s(self) -> float:
        return self.nbytes / READ_BYTES_PER_S + TIMING_S


def pair_bytes(pair: ModelPair) -> int:
    """A pair's 16-bit weights: the target's parameters as ddd.catalog counts them, and for its head (EAGLE's) one
    decoder layer of the target and the layer that feeds it."""
    config = target_size(pair)
    layer = parameter_count(SimpleNamespace(**{**vars(config), "num_hidden_layers": 1, "vocab_size": 0}))
    return (parameter_count(config) + layer + 2 * config.hidden_size ** 2) * 2


def fitting(first: ModelPair) -> list[tuple[ModelPair, SpacePair]]:
    """The pairs a ZeroGPU Space that races `first` first offers: `first`, then each of the catalog's other pairs that
    fits ZERO_GPU_BYTES beside those before it, by the same estimate Models.pin makes (ddd.catalog.needed_bytes), and
    keeps the weights under XLARGE_BYTES (the size whose duration factor the Space's asks count with); the default
    pair always loads."""
    chosen: list[tuple[ModelPair, SpacePair]] = []
    for pair in [first, *(p for p in PAIRS if p is not first)]:
        nbytes, held = pair_bytes(pair), sum(s.nbytes for _, s in chosen)
        if chosen and pair.gpu_only and (nbytes * HEADROOM > ZERO_GPU_BYTES - held or held + nbytes > XLARGE_BYTES):
            continue
        chosen.append((pair, SpacePair(pair.label, pair.model or DEFAULT_HUB_ID, pair.head, nbytes)))
    return chosen


@lru_cache(maxsize=1)
def space_race() -> SpaceRace:
    """The race a ZeroGPU Space opens on: the first pair of the catalog, not gated (a Space without a token loads
    it), whose GPU projection on ZeroGPU's card shows the papers' effect, with SPACE_RACES default races a day for a
    visitor who is not logged in (docs/results.md, "GPU projection")."""
    for pair in (p for p in PAIRS if not p.gated):
        projection = project(pair, ZEROGPU)
        if not shows_effect(projection):
            continue
        start = call_start_s(sum(s.nbytes for _, s in fitting(pair)))
        race = SpaceRace.of(projection, start)
        if race.tokens:
            return race
    raise ExportError("No pair of ddd.catalog.PAIRS shows the papers' effect within a visitor's ZeroGPU quota.")


def space_pairs() -> list[SpacePair]:
    """The pairs a ZeroGPU Space offers, the one it races first first."""
    return [space for _, space in fitting(space_race().projection.pair)]


def start_up_timeout(pairs: list[SpacePair]) -> str:
    minutes = max(math.ceil(2 * sum(p.start_up_s() for p in pairs) / 60 / 10) * 10, 30)
    return f"{minutes}m"


class ExportError(Exception):
    """The export cannot go ahead; the message says why and what to do."""
