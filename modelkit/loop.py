"""The training run: ranks, optimiser, schedule, sample order, logging, checkpoints, export.

A repo gives a :class:`Recipe` (a net factory, the loss of one step on given images, its
export) and calls :func:`train`. The loop splits the global ``--batch-size`` over the
ranks, draws the sample order and flips from (seed, epoch, step) (:func:`batch_indices`)
so a resumed run continues the same curve (modelkit/checkpoints.py), averages BatchNorm
statistics across ranks, writes ``OUT/rank-<r>.sha256``, logs the lines the pipeline
reads (``config: ...``, ``step=N epoch=E loss=L ...``, ``resumed from ...``,
``done: ...``) and exports on rank 0 (modelkit/export.py). Why:
docs/guides/model-repo.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import pathlib
import time
from typing import Any, Callable, Mapping

import numpy as np

from modelkit import checkpoints, kernels, warmstart
from modelkit.errors import TrainError, run_main
from modelkit.export import ExportContext
from modelkit.files import atomic_write_text
from modelkit.metrics import Metrics
from modelkit.weights_cache import WeightsCache, weights_key

__all__ = ["Recipe", "batch_indices", "lr_at", "main", "train"]


@dataclasses.dataclass(frozen=True)
class Recipe:
    """What a model repo brings to a run; everything else is the kit's."""

    #: The net, built after ``paddle.seed(--seed)`` so the initial weights follow the seed.
    #: A warm start (e.g. ``--init-from`` production's weights) loads its weights here; a
    #: checkpoint to resume or a weights-cache entry then takes precedence over them.
    make_net: Callable[[], Any]
    #: Training images (after ``--subset``): the schedule is over these.
    images: int
    #: The loss tensor of one step: (the net, DataParallel-wrapped on W > 1 ranks, this
    #: rank's image indices, their horizontal-flip flags) -> scalar loss.
    step_loss: Callable[[Any, np.ndarray, np.ndarray], Any]
    #: Parameters counted for the ``config:`` line.
    count_parameters: Callable[[Any], int]
    #: What decides the data (the dataset's digest): lineage and the weights cache key.
    dataset_digest: str
    #: Writes the artifact (rank 0, net in eval mode); see modelkit/export.py.
    export: Callable[[Any, ExportContext], object]
    #: The repo's directory: its ``*.py`` are part of the weights cache key.
    code_dir: pathlib.Path
    #: More inputs that decide the weights, for the cache key: name -> digest (a warm
    #: start's weights digest, say). Empty: data, hyperparameters, workers and code only.
    weights_inputs: Mapping[str, str] = dataclasses.field(default_factory=dict)


def lr_at(step: int, total: int, peak: float) -> float:
    """Linear warm-up (50 steps, less for short runs), then cosine decay to 2 % of the peak."""
    warmup = min(50, max(1, total // 10))
    if step < warmup:
        return peak * (step + 1) / warmup
    t = min(1.0, (step - warmup) / max(1, total - warmup))
    return float(peak * (0.02 + 0.98 * 0.5 * (1 + np.cos(np.pi * t))))


def batch_indices(step: int, steps_per_epoch: int, n: int, global_batch: int, seed: int,
                  rank: int, world: int) -> tuple[np.ndarray, np.ndarray]:
    """This rank's image indices and flip flags for a global step (pure function)."""
    epoch, k = divmod(step, steps_per_epoch)
    perm = np.random.default_rng([seed, epoch]).permutation(n)
    chosen = perm[k * global_batch:(k + 1) * global_batch]
    flips = np.random.default_rng([seed, epoch, k, 7]).random(global_batch) < 0.5
    return chosen[rank::world], flips[rank::world]


def _directories(args: argparse.Namespace) -> tuple[pathlib.Path, pathlib.Path]:
    out_dir, ckpt_dir = pathlib.Path(args.output_dir), pathlib.Path(args.checkpoint_dir)
    for d, flag in ((out_dir, "--output-dir"), (ckpt_dir, "--checkpoint-dir")):
        try:
            d.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise TrainError(f"cannot create {flag} {d}: {exc.strerror}") from None
    return out_dir, ckpt_dir


def train(args: argparse.Namespace, load: Callable[[], Recipe]) -> None:
    """Run the training `args` describe; `load` reads the data and returns the recipe
    (called once the ranks are up and the metrics are served)."""
    args.kernel_path = kernels.pin(getattr(args, "kernels", "reproducible"))  # before paddle
    import paddle
    import paddle.distributed as dist  # the same

    world = int(os.environ.get("PADDLE_TRAINERS_NUM", "1"))
    rank = int(os.environ.get("PADDLE_TRAINER_ID", "0"))
    paddle.set_device("cpu")
    if world > 1:
        dist.init_parallel_env()
        rank, world = dist.get_rank(), dist.get_world_size()
    if args.batch_size % world:
        raise TrainError(f"--batch-size {args.batch_size} is not divisible by {world} ranks")
    out_dir, ckpt_dir = _directories(args)
    metrics = Metrics.from_env(rank)
    try:
        recipe = load()
        _Run(args, recipe, rank, world, out_dir, ckpt_dir, metrics).run()
    finally:
        metrics.close()


def main(parse_args: Callable[[Any], argparse.Namespace],
         load: Callable[[argparse.Namespace], Recipe], argv: Any = None,
         *errors: type[BaseException]) -> int:
    """A `train.py`'s `main`: parse `argv`, train with the recipe `load(args)` returns; a
    `TrainError` or one of `errors` is one `error:` line and its exit code (see errors.py)."""
    def run() -> None:
        args = parse_args(argv)
        train(args, lambda: load(args))

    return run_main(run, *errors)


class _Run:
    """One run's state between the steps (the loop's own; a repo never sees it)."""

    def __init__(self, args: argparse.Namespace, recipe: Recipe, rank: int, world: int,
                 out_dir: pathlib.Path, ckpt_dir: pathlib.Path, metrics: Metrics) -> None:
        import paddle

        self.args, self.recipe, self.rank, self.world = args, recipe, rank, world
        self.out_dir, self.ckpt_dir, self.metrics = out_dir, ckpt_dir, metrics
        paddle.seed(args.seed)
        self.net = recipe.make_net()
        if args.init_from:  # a checkpoint or a cache entry, restored in resume(), still wins
            warmstart.load_into(self.net, args.init_from)
            if rank == 0:
                print(f"init from {args.init_from} (fine-tuning its weights)", flush=True)
        self.model = paddle.DataParallel(self.net) if world > 1 else self.net
        self.opt = paddle.optimizer.AdamW(learning_rate=args.lr,
                                          parameters=self.model.parameters(),
                                          weight_decay=1e-4)
        self.n = recipe.images
        self.spe = self.n // args.batch_size
        if self.spe < 1:
            raise TrainError(f"{self.n} training images cannot fill one batch of "
                             f"{args.batch_size}")
        self.total = args.epochs * self.spe
        if args.max_steps:
            self.total = min(self.total, args.max_steps)
        self.cache = (WeightsCache(pathlib.Path(args.weights_cache),
                                   weights_key(args, recipe.dataset_digest, world,
                                               recipe.code_dir,
                                               {**recipe.weights_inputs,
                                                **warmstart.cache_inputs(args),
                                                "kernels": args.kernel_path}))
                      if args.weights_cache else None)

    def resume(self) -> tuple[int, bool]:
        """(the step to start from, whether the weights came from the cache)."""
        start = checkpoints.latest(self.ckpt_dir)
        from_cache = False
        if start is None and self.cache is not None and self.cache.lookup() is not None:
            start, from_cache = self.cache.path, True
            if self.rank == 0:
                print(f"weights cache: {self.cache.key} holds this run's weights (same data, "
                      "hyperparameters, workers and code); exporting them", flush=True)
        if start is None:
            return 0, False
        state = checkpoints.load(start, global_batch=self.args.batch_size, images=self.n)
        self.net.set_state_dict(state["model"])
        self.opt.set_state_dict(state["optimizer"])
        step = int(state["meta"]["step"])
        print(f"resumed from {start.name} at step={step} "
              f"(loss={state['meta'].get('loss', float('nan')):.4f})", flush=True)
        return step, from_cache

    def sync_buffers(self) -> None:
        """Average the BatchNorm statistics over the ranks (no-op on one)."""
        if self.world == 1:
            return
        import paddle.distributed as dist

        # Paddle keeps BN running statistics as non-trainable *parameters*
        # (not buffers), and DataParallel only all-reduces gradients.
        for _name, stat in self.net.named_parameters():
            if stat.stop_gradient:
                dist.all_reduce(stat)
                stat.set_value(stat / self.world)

    def save_checkpoint(self, step: int, loss: float) -> None:
        """Every rank syncs the statistics; rank 0 writes."""
        self.sync_buffers()
        if self.rank != 0:
            return
        meta = {"step": step, "epoch": step // self.spe, "loss": float(loss),
                "seed": self.args.seed, "world": self.world,
                "global_batch": self.args.batch_size, "images": self.n}
        checkpoints.save(self.ckpt_dir, step, {"model": self.net.state_dict(),
                                               "optimizer": self.opt.state_dict(),
                                               "meta": meta})

    def run(self) -> None:
        """Resume, train to the last step, export on rank 0."""
        import paddle.distributed as dist

        args, world, total, spe = self.args, self.world, self.total, self.spe
        step, from_cache = self.resume()
        if self.rank == 0:
            print(f"config: world={world} images={self.n} steps_per_epoch={spe} "
                  f"total_steps={total} global_batch={args.batch_size} "
                  f"params={self.recipe.count_parameters(self.net)} "
                  f"dataset={self.recipe.dataset_digest}", flush=True)
        self.model.train()
        window_start, window_images, loss_value = time.time(), 0, float("nan")
        while step < total:
            idx, flips = batch_indices(step, spe, self.n, args.batch_size, args.seed,
                                       self.rank, world)
            self.opt.set_lr(lr_at(step, total, args.lr))
            loss = self.recipe.step_loss(self.model, idx, flips)
            loss.backward()
            self.opt.step()
            self.opt.clear_grad()
            step += 1
            window_images += len(idx)
            epoch = (step - 1) // spe
            logged = step % args.log_every == 0 or step == total
            speed = None
            if logged:
                mean_loss = loss.detach().clone()
                if world > 1:
                    dist.all_reduce(mean_loss)
                    mean_loss = mean_loss / world
                loss_value = float(mean_loss)
                speed = window_images / max(time.time() - window_start, 1e-9)
                if self.rank == 0:
                    print(f"step={step} epoch={epoch} loss={loss_value:.4f} "
                          f"images/s={speed * world:.1f} "
                          f"lr={lr_at(step - 1, total, args.lr):.5f}", flush=True)
                window_start, window_images = time.time(), 0
            self.metrics.update(step, epoch, loss_value if logged else None, speed)
            if step % args.checkpoint_every == 0 or step % spe == 0 or step == total:
                self.save_checkpoint(step, float(loss))
        self.finish(step, from_cache)

    def finish(self, step: int, from_cache: bool) -> None:
        """Store in the cache, write this rank's weights digest, export on rank 0."""
        if self.cache is not None and not from_cache and self.rank == 0 and step == self.total:
            final = checkpoints.latest(self.ckpt_dir)
            if final is not None:
                self.cache.store(final)
        self.sync_buffers()
        self.net.eval()
        weights = checkpoints.weights_digest(self.net.state_dict())
        atomic_write_text(self.out_dir / f"rank-{self.rank}.sha256", weights + "\n")
        if self.rank == 0:
            self.recipe.export(self.net, ExportContext(
                args=self.args, out_dir=self.out_dir, dataset_digest=self.recipe.dataset_digest,
                total_steps=self.total, world=self.world))
        print(f"done: rank={self.rank} step={step} weights_sha256={weights}", flush=True)
