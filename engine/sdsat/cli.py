"""``fastcoder train-sdsat`` and ``fastcoder eval-sdsat``: make any causal LM an SDSAT model, and measure it.

``train-sdsat`` runs :func:`engine.sdsat.train.train_sdsat` (the recipe of SDSAT section 2.2 and
appendix A); ``eval-sdsat`` prints the loss on standard tokens and the acceptance per adaptive
position (:mod:`engine.sdsat.evaluate`, the paper's Figure 3) of one or more models on a corpus, as
one JSON object, so a base model and its fine-tuned SDSAT version are compared on the same text.
"""

from __future__ import annotations

import json
import sys
from dataclasses import fields
from pathlib import Path

from .train import DEFAULT_ADAPTIVE_TOKEN, SdsatTrainOptions


def add_commands(sub) -> None:
    """Register ``train-sdsat`` and ``eval-sdsat`` on an ``argparse`` subparsers object."""
    defaults = SdsatTrainOptions()
    p = sub.add_parser("train-sdsat", help="fine-tune a model into an SDSAT model (adaptive tokens)",
                       description="Fine-tune a causal LM with semantic adaptive tokens (SDSAT, section 2.2): "
                                   "half standard sequences, half mixed ones with windows of 1..L adaptive "
                                   "tokens; the output folder holds the model, its tokenizer and sdsat.json.")
    p.add_argument("--model", required=True, help="model folder or hub id to start from")
    p.add_argument("--corpus", required=True, type=Path, help="folder of .py files to train on")
    p.add_argument("--out", required=True, type=Path, help="output folder (checkpoints, model, sdsat.json)")
    p.add_argument("--max-window", type=int, default=defaults.max_window, help="L: longest adaptive window")
    p.add_argument("--steps", type=int, default=defaults.steps, help="optimizer steps")
    p.add_argument("--seq-len", type=int, default=defaults.seq_len, help="tokens per training sequence")
    p.add_argument("--batch-size", type=int, default=defaults.batch_size, help="sequences per micro-batch")
    p.add_argument("--grad-accum", type=int, default=defaults.grad_accum, help="micro-batches per step")
    p.add_argument("--lr", type=float, default=defaults.lr, help="peak learning rate")
    p.add_argument("--warmup-steps", type=int, default=defaults.warmup_steps)
    p.add_argument("--save-steps", type=int, default=defaults.save_steps, help="checkpoint interval (steps)")
    p.add_argument("--fim-rate", type=float, default=defaults.fim_rate,
                   help="share of FIM samples when the tokenizer has FIM tokens (keeps infilling; 0: none)")
    p.add_argument("--threads", type=int, default=defaults.threads, help="torch threads on CPU (0: default)")
    p.add_argument("--seed", type=int, default=defaults.seed)
    p.add_argument("--adaptive-token", default=DEFAULT_ADAPTIVE_TOKEN,
                   help="the adaptive token's text (added to the vocabulary when missing)")
    p.add_argument("--eval-corpus", type=Path, default=None,
                   help="held-out .py folder: loss on standard tokens before and after")
    p.add_argument("--merge-alpha", type=float, default=defaults.merge_alpha,
                   help="save base + ALPHA * (fine-tuned - base) (WiSE-FT; default %(default)s; 0.5 kept tiny-py-coder's "
                        "standard-token loss within 1%% on third-party code)")
    p.add_argument("--resume", action="store_true", help="continue from the newest checkpoint in --out")
    p.set_defaults(func=cmd_train)

    e = sub.add_parser("eval-sdsat", help="loss on standard tokens and acceptance per adaptive position",
                       description="Measure models on a corpus: standard-token loss (nats/token) and, for "
                                   "SDSAT models, the acceptance per adaptive position 1..k (Figure 3).")
    e.add_argument("--model", required=True, action="append",
                   help="model folder (repeat to compare; a model without sdsat.json is measured with the "
                        "adaptive token id of the first SDSAT model given)")
    e.add_argument("--corpus", required=True, type=Path, help="folder of .py files (third-party code)")
    e.add_argument("--k", type=int, default=8, help="adaptive positions measured")
    e.add_argument("--contexts", type=int, default=64, help="cut points for the acceptance")
    e.add_argument("--seq-len", type=int, default=512)
    e.add_argument("--threads", type=int, default=0)
    e.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    e.set_defaults(func=cmd_eval)


def cmd_train(args) -> int:
    from engine.cli import CLIError  # noqa: PLC0415

    from .train import train_sdsat  # noqa: PLC0415

    if not args.corpus.exists():
        raise CLIError(f"--corpus {args.corpus} does not exist")
    names = {f.name for f in fields(SdsatTrainOptions)}
    try:
        options = SdsatTrainOptions(**{k: v for k, v in vars(args).items() if k in names})
    except ValueError as err:
        raise CLIError(str(err)) from None
    try:
        stats = train_sdsat(args.model, args.corpus, args.out, options, resume=args.resume,
                            adaptive_token=args.adaptive_token, eval_corpus=args.eval_corpus)
    except (ValueError, OSError) as err:
        raise CLIError(str(err)) from None
    json.dump(stats, sys.stdout, indent=2)
    sys.stdout.write("\n")
    print(f"SDSAT model written to {args.out}", file=sys.stderr)
    return 0


def cmd_eval(args) -> int:
    import torch  # noqa: PLC0415
    from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: PLC0415

    from engine.cli import CLIError  # noqa: PLC0415

    from .config import NotAnSdsatModel, load_sdsat_config  # noqa: PLC0415
    from ..fim import detect_fim_template  # noqa: PLC0415
    from .evaluate import adaptive_acceptance, fim_middle_loss, standard_loss  # noqa: PLC0415

    if args.threads:
        torch.set_num_threads(args.threads)
    if not args.corpus.is_dir():
        raise CLIError(f"--corpus {args.corpus} is not a folder")
    configs = {}
    for m in args.model:
        try:
            configs[m] = load_sdsat_config(m)
        except (NotAnSdsatModel, OSError, ValueError):
            configs[m] = None
    adaptive = next((c for c in configs.values() if c is not None), None)
    result: dict = {"corpus": str(args.corpus), "k": args.k, "models": {}}
    for m in args.model:
        try:
            tokenizer = AutoTokenizer.from_pretrained(m)
            lm = AutoModelForCausalLM.from_pretrained(m, dtype=torch.float32).eval()
        except (OSError, ValueError) as err:
            raise CLIError(f"model {m}: {err}") from None
        row: dict = {"sdsat": configs[m] is not None,
                     "standard_loss": standard_loss(lm, tokenizer, args.corpus, args.seq_len)}
        fim = detect_fim_template(tokenizer)
        if fim is not None:
            row["fim_middle_loss"] = fim_middle_loss(lm, tokenizer, args.corpus, fim[1], args.seq_len)
        if adaptive is not None:
            row["acceptance"] = adaptive_acceptance(lm, tokenizer, args.corpus, adaptive.adaptive_token_id,
                                                    k=args.k, contexts=args.contexts)
        result["models"][m] = row
    text = json.dumps(result, indent=2)
    print(text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n", encoding="utf-8")
    return 0

