"""The PyTorch side of dtrain's language-model convergence test.

Trains bench/peers/lm_models.py's GPT on the same token shards, in the same
data order and with the same hyper-parameters as the `dtrain train` run the
test starts beside it, and prints the final validation loss as JSON:

  - windows of seq_len + 1 tokens at w * seq_len over the training shards;
    epoch e visits them in torch.randperm(windows, generator seeded seed + e)
    order (one rank: DistributedSampler's order), batch b = windows
    [b * batch, (b + 1) * batch);
  - AdamW (betas 0.9 / beta2, eps 1e-8), weight decay only on parameters of
    two or more dimensions that are not embeddings (dtrain's groups);
  - linear warm-up over warmup_steps (lr * (s + 1) / warmup), then cosine
    from lr to min_lr over the remaining steps; gradients clipped to a global
    norm; float32 on the CPU;
  - validation: the first eval_batches batches of the validation windows in
    file order, mean cross-entropy per token.
Only the initial weights differ (each side draws its own), which is why the
test compares the losses within a tolerance.
"""

import argparse
import glob
import json
import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench", "peers"))
import lm_models  # noqa: E402


def read_tokens(pattern):
    """Tokens of the llm.c shards matching the pattern, concatenated."""
    parts = []
    for path in sorted(glob.glob(pattern)):
        header = np.fromfile(path, dtype=np.int32, count=256)
        assert header[0] == 20240520, f"{path}: bad magic"
        dtype = np.uint16 if header[1] == 1 else np.uint32
        tokens = np.fromfile(path, dtype=dtype, offset=256 * 4)
        assert len(tokens) == header[2], f"{path}: {len(tokens)} tokens, header says {header[2]}"
        parts.append(tokens.astype(np.int64))
    assert parts, f"no shards match {pattern}"
    return torch.from_numpy(np.concatenate(parts))


def windows(tokens, seq_len, ids):
    rows = torch.stack([tokens[w * seq_len:w * seq_len + seq_len + 1] for w in ids.tolist()])
    return rows[:, :-1].contiguous(), rows[:, 1:].contiguous()


def learning_rate(step, args):
    if step < args.warmup_steps:
        return args.lr * (step + 1) / args.warmup_steps
    progress = min(1.0, (step - args.warmup_steps) / (args.steps - args.warmup_steps))
    return args.min_lr + (args.lr - args.min_lr) * 0.5 * (1 + math.cos(math.pi * progress))


def optimizer_for(model, args):
    exempt = {id(p) for name, p in model.named_parameters() if p.dim() < 2 or "wte" in name or "wpe" in name
              or "tok_embeddings" in name}
    decayed = [p for p in model.parameters() if id(p) not in exempt]
    undecayed = [p for p in model.parameters() if id(p) in exempt]
    groups = [{"params": decayed, "weight_decay": args.weight_decay}, {"params": undecayed, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=args.lr, betas=(0.9, args.beta2), eps=1e-8)


def train(model, tokens, args):
    count = (len(tokens) - 1) // args.seq_len
    batches = count // args.batch
    optimizer = optimizer_for(model, args)
    step, epoch = 0, 0
    while step < args.steps:
        generator = torch.Generator()
        generator.manual_seed(args.seed + epoch)
        order = torch.randperm(count, generator=generator)
        for b in range(batches):
            if step == args.steps:
                break
            inputs, targets = windows(tokens, args.seq_len, order[b * args.batch:(b + 1) * args.batch])
            for group in optimizer.param_groups:
                group["lr"] = learning_rate(step, args)
            optimizer.zero_grad(set_to_none=False)
            model.loss(inputs, targets).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
            optimizer.step()
            step += 1
        epoch += 1


def validation_loss(model, tokens, args):
    count = (len(tokens) - 1) // args.seq_len
    total, n = 0.0, 0
    model.eval()
    with torch.no_grad():
        for b in range(args.eval_batches):
            ids = torch.arange(b * args.batch, min((b + 1) * args.batch, count))
            if len(ids) == 0:
                break
            inputs, targets = windows(tokens, args.seq_len, ids)
            total += model.loss(inputs, targets).item() * targets.numel()
            n += targets.numel()
    return total / n


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shards", required=True, help="directory of <name>_train_*.bin and <name>_val_*.bin")
    for name, kind, default in [("layers", int, 2), ("dim", int, 64), ("heads", int, 4), ("seq-len", int, 64),
                                ("vocab-size", int, 320), ("batch", int, 16), ("steps", int, 300),
                                ("warmup-steps", int, 20), ("eval-batches", int, 20), ("seed", int, 3),
                                ("lr", float, 1e-3), ("min-lr", float, 1e-4), ("beta2", float, 0.95),
                                ("weight-decay", float, 0.1), ("clip", float, 1.0), ("torch-seed", int, 0)]:
        p.add_argument("--" + name, type=kind, default=default)
    args = p.parse_args()
    torch.manual_seed(args.torch_seed)
    torch.set_num_threads(1)
    cfg = lm_models.named_config("gpt2", layers=args.layers, dim=args.dim, heads=args.heads, seq_len=args.seq_len,
                                 vocab_size=args.vocab_size)
    model = lm_models.build(cfg)
    train(model, read_tokens(os.path.join(args.shards, "*_train_*.bin")), args)
    val = validation_loss(model, read_tokens(os.path.join(args.shards, "*_val_*.bin")), args)
    print(json.dumps({"val_loss": val, "steps": args.steps}))


if __name__ == "__main__":
    main()
