"""A common datastore of the model's own output: D_c built from what the model writes, not from source code.

Retrieval drafts are accepted when they spell what the model will write, and a small code model writes its own
dialect: on code it was not trained on, tiny-py-coder drifts into recurring phrases (``Return the object object
for the object object.``) that no corpus of real source holds. SuffixDecoding (Oliaro et al., NeurIPS 2025,
section 3) exploits this online with a global suffix tree over earlier requests' outputs, as fastcoder's
completion history (:mod:`engine.history`) does; this module does it ahead of time: run the model greedily at
sampled positions of a code corpus and index what it wrote as a :class:`~engine.datastore.Datastore`, which is
then used as D_c (``--common PATH``, the server's ``commonDatastore``) in place of the standard library.

Each document is ``context_tokens`` prompt tokens followed by the model's continuation (``new_tokens`` tokens,
greedy, EOS excluded), so a match can begin in the code before what the model wrote. Generation is exact
(the lossless fastcoder decoder, no D_c), deterministic for a corpus, a model and the settings.

Measured (oracle replay of the benchmark, ``benchmarks/results/2026-11-26/exp_replay.sh``: fastcoder's
trajectory, tiny-py-coder, 10 tasks per cell, the verify cost c(n) of the project's 2-core CPU; 2026-11-26): the
datastore of ``benchmarks/results/2026-11-26/build_outputs.sh`` (15 installed third-party packages that are not
benchmark repositories, 4,000 samples of 64 tokens, 351K tokens, 9 minutes on one core, 25 s of it
tokenising) against the standard library's D_c (8.6M tokens of source), committed tokens per unit of verify cost:
``function`` tasks pluggy / jinja2 / pygls +6.0 / +4.2 / +5.7%, ``fim-line`` +0.2 / 0.0 / +0.4%, ``fim-block``
+0.1 / -0.3 / +0.3%. A store from 21 other packages (262K tokens) gave the same, both together (613K) nothing more.
In earlier trials (the same replay): 79K tokens of output gave about half of that; adding 132K
tokens of output on the standard library (the model's training set) gave nothing more, and neither did
concatenating the outputs with the standard library's source (its longer matches win the suffix search). The
benchmark's corpus must leave out the repository under test: a sample there would be a completion cached before it
is asked for.
"""

from __future__ import annotations

import json
import logging
import os
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from .common_datastore import corpus_files, tokenizer_fingerprint
from .datastore import Datastore, DatastoreError

log = logging.getLogger(__name__)

#: Written beside a model-output datastore's arrays: the settings, the corpus and the model it came from.
INFO_FILE = "model_outputs.json"
#: Tokens a sampled position keeps after it in its file (a position is never at a file's very end).
TAIL_TOKENS = 32


@dataclass(frozen=True)
class OutputSampling:
    """Where and how much the model writes for a model-output datastore.

    samples: generations in all (documents of the datastore); per_file: positions sampled in each file
    (files are taken in a seeded random order until ``samples`` are made); prompt_tokens: tokens of code
    before a position given to the model (the prompt); new_tokens: tokens the model writes at most;
    context_tokens: prompt tokens kept in front of each output in the datastore; seed: file order and
    positions.
    """

    samples: int = 4000
    per_file: int = 3
    prompt_tokens: int = 256
    new_tokens: int = 64
    context_tokens: int = 24
    seed: int = 0

    def __post_init__(self):
        if self.samples < 1 or self.per_file < 1 or self.new_tokens < 1:
            raise ValueError(f"samples, per_file and new_tokens must be >= 1, got {self.samples}, "
                             f"{self.per_file}, {self.new_tokens}")
        if self.prompt_tokens < 1 or not 0 <= self.context_tokens <= self.prompt_tokens:
            raise ValueError(f"need prompt_tokens >= 1 and 0 <= context_tokens <= prompt_tokens, got "
                             f"{self.prompt_tokens}, {self.context_tokens}")


def sample_prompts(tokenizer, files: Sequence[Path], sampling: OutputSampling,
                   progress: bool = False) -> list[list[int]]:
    """Prompts (lists of ``sampling.prompt_tokens`` token ids) at seeded random positions of ``files``:
    ``per_file`` positions per file with at least ``prompt_tokens +`` :data:`TAIL_TOKENS` tokens, files in a
    seeded random order, until ``samples`` prompts. Unreadable files are skipped. Fewer prompts when the corpus
    is small. ``progress``: a tqdm bar of the prompts found (each file is tokenised whole)."""
    from .source_files import read_source_text  # noqa: PLC0415

    rng = random.Random(sampling.seed)
    order = list(files)
    rng.shuffle(order)
    prompts: list[list[int]] = []
    bar = None
    if progress:
        from tqdm import tqdm  # noqa: PLC0415

        bar = tqdm(total=sampling.samples, desc="prompts", unit="prompt")
    for path in order:
        if len(prompts) >= sampling.samples:
            break
        text = read_source_text(path)
        if not text:
            continue
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        if len(ids) < sampling.prompt_tokens + TAIL_TOKENS:
            continue
        for _ in range(min(sampling.per_file, sampling.samples - len(prompts))):
            pos = rng.randrange(sampling.prompt_tokens, len(ids) - TAIL_TOKENS + 1)
            prompts.append([int(t) for t in ids[pos - sampling.prompt_tokens:pos]])
            if bar is not None:
                bar.update(1)
    if bar is not None:
        bar.close()
    return prompts


def generate_outputs(loaded, prompts: Sequence[Sequence[int]], new_tokens: int,
                     progress: bool = False) -> list[list[int]]:
    """The model's greedy continuation (token ids, EOS excluded, at most ``new_tokens``) of each prompt, from
    the lossless fastcoder decoder without datastores (the model's own output, only faster); ``progress``: a
    tqdm bar."""
    from .decoder import SpeculativeDecoder  # noqa: PLC0415

    decoder = SpeculativeDecoder(loaded, method="fastcoder")
    if progress:
        from tqdm import tqdm  # noqa: PLC0415

        prompts = tqdm(prompts, desc="model outputs", unit="sample")
    return [list(decoder.generate(list(prompt), max_new_tokens=new_tokens).token_ids) for prompt in prompts]


def build_model_output_datastore(loaded, corpora: Sequence[str | os.PathLike], out: str | os.PathLike,
                                 sampling: OutputSampling | None = None, progress: bool = True) -> Path:
    """Run the model at sampled positions of the source files under ``corpora`` (folders; the D_r file filter)
    and save a :class:`~engine.datastore.Datastore` of ``context_tokens`` prompt tokens + the output per sample
    at ``out``, with :data:`INFO_FILE` (settings, corpora, model, tokens, seconds) beside it.

    Returns the output folder. Raises DatastoreError when a corpus folder is missing or no file is long enough
    for one prompt. Cost: one greedy generation per sample (tiny-py-coder on one CPU core: ~7 samples of 64
    tokens a second)."""
    sampling = sampling or OutputSampling()
    files: list[Path] = []
    roots = []
    for corpus in corpora:
        root, found = corpus_files(corpus)
        roots.append(str(root))
        files.extend(found)
    tokenizer = loaded.tokenizer
    prompts = sample_prompts(tokenizer, files, sampling, progress=progress)
    if not prompts:
        raise DatastoreError(f"no source file under {', '.join(roots) or 'the corpora'} has "
                             f"{sampling.prompt_tokens + TAIL_TOKENS} tokens for a prompt")
    t0 = time.perf_counter()
    outputs = generate_outputs(loaded, prompts, sampling.new_tokens, progress=progress)
    keep = sampling.context_tokens
    docs = [np.asarray((p[-keep:] if keep else []) + o, dtype=np.int64) for p, o in zip(prompts, outputs)]
    ds = Datastore.from_documents(docs, len(tokenizer), tokenizer_fingerprint=tokenizer_fingerprint(tokenizer))
    path = ds.save(out)
    info = {"sampling": asdict(sampling), "corpora": roots, "files": len(files), "samples": len(docs),
            "tokens": int(sum(len(d) for d in docs)), "output_tokens": int(sum(len(o) for o in outputs)),
            "model": str(getattr(loaded.model.config, "_name_or_path", "")),
            "seconds": round(time.perf_counter() - t0, 1)}
    (Path(path) / INFO_FILE).write_text(json.dumps(info, indent=1) + "\n")
    log.info("model-output datastore: %d samples, %d tokens -> %s", len(docs), info["tokens"], path)
    return Path(path)
