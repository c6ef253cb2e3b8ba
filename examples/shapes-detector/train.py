"""Train, checkpoint, export: the shapes detector's one entrypoint (the pipeline's contract).

    python train.py --output-dir OUT --checkpoint-dir CKPT [--data-dir data] [--epochs N]
        [--batch-size B] [--lr LR] [--max-steps N] [--subset N] [--seed S] [--log-every N]
        [--drill-delay-ms MS] [--drill-error-rate R] [--drill-error-status 500|503]
        [--drill-skew none|no-scale|mean-std|bgr]
        [--weights-cache DIR] [--init-from MODEL_DIR]
    python -m paddle.distributed.launch --nproc_per_node 2 --log_dir LOGS train.py <same flags>

Environment (all optional): MLOPS_TRAINING_COMMIT, MLOPS_WORKFLOW_ID (lineage,
copied into model.yaml); MLOPS_METRICS_PORT (rank r serves Prometheus
``/metrics`` on port + r while it runs; 0 or unset: no server).

Why a ``/metrics`` endpoint and not a Pushgateway: it needs no extra service,
and in a cluster Prometheus already discovers and scrapes pods; a Pushgateway
would also keep a finished job's last values forever.

Design notes:

* ``--batch-size`` is the *global* batch; each of the W ranks takes every W-th
  image of it. Same flags, same optimisation, whatever the number of workers.
* The sample order and the flips are pure functions of (seed, epoch, step),
  so resuming needs no RNG state: a checkpoint holds model + optimizer + step,
  and a run killed at any point and restarted continues the same curve.
* Checkpoints go to ``CKPT/ckpt-<step>.pdckpt``, written to a temporary name
  and renamed (atomic), every ``--checkpoint-every`` steps and at every epoch
  end; the newest two are kept.
* Gradients are all-reduced by ``paddle.DataParallel`` (gloo on CPU).
  BatchNorm running statistics (non-trainable parameters in Paddle) are not,
  so they are averaged across ranks before each checkpoint and at the end;
  every rank then writes the sha256 of its weights to ``OUT/rank-<r>.sha256``
  (they must be equal).
* Rank 0 exports with ``paddle.jit.save`` to ``OUT/model/inference.{json,pdiparams}``,
  writes ``infer_cfg.yml`` and ``model.yaml``, then runs the *exported* model
  with ``paddle.inference`` + ``postprocess.decode`` over the val set into
  ``OUT/bbox.json`` (COCO detections).
* ``--drill-*`` declare a fault drill: the export's ``infer_cfg.yml`` gets a
  ``fault:`` section (the server then slows or fails that share of requests
  on purpose, to rehearse a canary rollback) and ``model.yaml`` a ``drill:``
  record. Training itself is unchanged; the version is not (see
  ``model_version``), so a drill never shares a version with its clean twin.
  ``--drill-skew`` instead exports ``infer_cfg.yml`` with a serving-side
  mistake (pixels not divided by 255, mean and std swapped, or the channel
  order): the gate's mAP is
  computed with the training code's preprocessing and passes; only the
  answers on live traffic show it (the canary's quality checks).
* ``--weights-cache DIR`` keeps each finished run's final checkpoint under a
  key of everything that decides the weights (dataset digest, hyperparameters,
  worker count, this directory's code); a later run with the same key starts
  from it, trains zero steps and exports. A push that changes only serving
  flags (``--drill-*``) then takes seconds instead of minutes; the weights,
  and so their digest, are the ones trained before. Unset: no cache.
* ``--init-from MODEL_DIR`` starts from the weights of an export (the model in
  production: the pipeline passes it when ``mlops.yaml`` says
  ``training.init_from: production``), so a weekly retrain is a fine-tune;
  empty: from scratch. A checkpoint to resume from wins over it.
"""

import argparse
import os
import sys

# One thread per rank: Paddle 3 on CPU trains about 2x slower with two threads per process
# than with one when two processes share two cores. Must happen before paddle/numpy import.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import hashlib  # noqa: E402
import json  # noqa: E402
import pathlib  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import yaml  # noqa: E402

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import shapes_data  # noqa: E402
from postprocess import decode, preprocess  # noqa: E402

MODEL_NAME = "shapes-detector"
MEAN = [0.5, 0.5, 0.5]
STD = [0.25, 0.25, 0.25]
DECODE = {"stride": 8, "top_k": 40, "score_threshold": 0.02, "nms_kernel": 3}


class TrainError(Exception):
    """Bad input or an unusable directory; printed as one line, exit code 2."""

    exit_code = 2


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="Train the synthetic-shapes CenterNet detector.")
    p.add_argument("--output-dir", required=True, help="export + bbox.json go here")
    p.add_argument("--checkpoint-dir", required=True, help="checkpoints; resumed from")
    p.add_argument("--data-dir", default="data",
                   help="the dataset: the pipeline passes the one prepare-data verified from "
                   "the repo's pins (annotations/<split>.json, images/); by hand, make one with "
                   "shapes_data.py")
    p.add_argument("--epochs", type=int, default=12)
    p.add_argument("--batch-size", type=int, default=32, help="global batch, split over ranks")
    p.add_argument("--lr", type=float, default=4e-3, help="peak AdamW learning rate")
    p.add_argument("--max-steps", type=int, default=0, help="cap on total steps (0 = none)")
    p.add_argument("--subset", type=int, default=0, help="use only the first N train images")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--checkpoint-every", type=int, default=50, help="steps between checkpoints")
    drill = p.add_argument_group(
        "fault drill", "declare that the exported version misbehaves on purpose (infer_cfg.yml "
        "fault:), to rehearse a canary rollback; all zero = a normal model")
    drill.add_argument("--drill-delay-ms", type=float, default=0.0, metavar="MS",
                       help="delay the server adds to every inference request, ms")
    drill.add_argument("--drill-error-rate", type=float, default=0.0, metavar="SHARE",
                       help="share of inference requests the server fails (0..1)")
    drill.add_argument("--drill-error-status", type=int, default=500, metavar="{500,503}",
                       help="HTTP status of the injected errors")
    drill.add_argument("--drill-skew", choices=SKEWS, default="none",
                       help="export infer_cfg.yml with a serving-side mistake the offline gate "
                       "cannot see (it evaluates with the training code's preprocessing): "
                       "no-scale feeds 0..255 pixels (scale 1 instead of 1/255), mean-std "
                       "swaps the normalisation's mean and std, bgr the channel order")
    p.add_argument("--weights-cache", default="", metavar="DIR",
                   help="reuse the final checkpoint of an earlier run with the same data, "
                   "hyperparameters, workers and code (empty: train every time)")
    p.add_argument("--init-from", default="", metavar="MODEL_DIR",
                   help="start from this export's weights (inference.json/.pdiparams; "
                   "empty: from scratch)")
    args = p.parse_args(argv)
    for name in ("epochs", "batch_size", "log_every", "checkpoint_every"):
        if getattr(args, name) < 1:
            raise TrainError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    for name in ("max_steps", "subset"):
        if getattr(args, name) < 0:
            raise TrainError(f"--{name.replace('_', '-')} must be >= 0, got {getattr(args, name)}")
    if not args.lr > 0:
        raise TrainError(f"--lr must be > 0, got {args.lr}")
    # the same bounds the server's infer_cfg.yml check applies (serving/modeldir.py FaultConfig)
    if not 0 <= args.drill_delay_ms <= 3_600_000:  # also refuses nan
        raise TrainError(f"--drill-delay-ms must be in 0..3600000, got {args.drill_delay_ms}")
    if not 0 <= args.drill_error_rate <= 1:
        raise TrainError(f"--drill-error-rate must be between 0 and 1, got {args.drill_error_rate}")
    if args.drill_error_status not in (500, 503):
        raise TrainError(f"--drill-error-status must be 500 or 503, got {args.drill_error_status}")
    return args


def lr_at(step, total, peak):
    """Linear warm-up (50 steps, less for short runs), then cosine decay to 2 % of the peak."""
    warmup = min(50, max(1, total // 10))
    if step < warmup:
        return peak * (step + 1) / warmup
    t = min(1.0, (step - warmup) / max(1, total - warmup))
    return peak * (0.02 + 0.98 * 0.5 * (1 + np.cos(np.pi * t)))


def batch_indices(step, steps_per_epoch, n, global_batch, seed, rank, world):
    """This rank's image indices and flip flags for a global step (pure function)."""
    epoch, k = divmod(step, steps_per_epoch)
    perm = np.random.default_rng([seed, epoch]).permutation(n)
    chosen = perm[k * global_batch:(k + 1) * global_batch]
    flips = np.random.default_rng([seed, epoch, k, 7]).random(global_batch) < 0.5
    return chosen[rank::world], flips[rank::world]


def boxes_by_image(coco, entries):
    """[category_id, x, y, w, h] arrays, one per image in ``entries`` order."""
    by_id = {e["id"]: [] for e in entries}
    for a in coco["annotations"]:
        if a["image_id"] in by_id:
            by_id[a["image_id"]].append([a["category_id"], *a["bbox"]])
    return [np.asarray(by_id[e["id"]], np.float32).reshape(-1, 5) for e in entries]


def make_batch(images, boxes, idx, flips, cfg):
    """Normalised NCHW batch + per-image boxes, horizontally flipped where ``flips``."""
    batch = images[idx].copy()
    out_boxes = []
    width = images.shape[2]
    for j, i in enumerate(idx):
        b = boxes[i].copy()
        if flips[j]:
            batch[j] = batch[j, :, ::-1]
            b[:, 1] = width - b[:, 1] - b[:, 3]
        out_boxes.append(b)
    return preprocess(batch, cfg), out_boxes


class Metrics:
    """Prometheus gauges/counter served on ``/metrics`` (no-op when port is 0/unset)."""

    def __init__(self, port, rank):
        self.enabled = bool(port)
        if not self.enabled:
            return
        from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server
        reg = CollectorRegistry()
        labels = {"rank": str(rank)}
        self.loss = Gauge("training_loss", "Training loss of the last logged step",
                          ["rank"], registry=reg).labels(**labels)
        self.speed = Gauge("training_images_per_second", "Images/s of this rank",
                           ["rank"], registry=reg).labels(**labels)
        self.step = Gauge("training_step", "Global optimisation step reached (resumes included)",
                          ["rank"], registry=reg).labels(**labels)
        self.epoch = Gauge("training_epoch", "Current epoch",
                           ["rank"], registry=reg).labels(**labels)
        self.steps = Counter("training_steps", "Steps run by this process",
                             ["rank"], registry=reg).labels(**labels)
        try:
            self.server, self.thread = start_http_server(port + rank, registry=reg)
        except OSError as exc:
            raise TrainError(
                f"cannot serve metrics on port {port + rank}: {exc.strerror}") from None

    def update(self, step, epoch, loss=None, speed=None):
        if not self.enabled:
            return
        self.steps.inc()
        self.step.set(step)
        self.epoch.set(epoch)
        if loss is not None:
            self.loss.set(loss)
        if speed is not None:
            self.speed.set(speed)

    def close(self):
        if self.enabled:
            self.server.shutdown()
            self.server.server_close()


def weights_digest(state):
    """sha256 over the named parameters and buffers, in name order."""
    h = hashlib.sha256()
    for name in sorted(state):
        h.update(name.encode())
        h.update(np.ascontiguousarray(state[name].numpy()).tobytes())
    return h.hexdigest()


def load_init_weights(net, model_dir):
    """Set `net`'s weights from an export (`paddle.jit.save` of the same network).

    `paddle.jit.load` gives the export's parameters under their program names,
    the network's own names with a `_<n>` suffix when they clash with the
    network built in this process; each must be found, with the same shape."""
    import paddle

    prefix = pathlib.Path(model_dir) / "inference"
    if not prefix.with_suffix(".pdiparams").is_file():
        raise TrainError(f"--init-from {model_dir}: no inference.pdiparams (not an export)")
    loaded = {v.name: v for v in paddle.jit.load(str(prefix)).state_dict().values()}
    state = {}
    for key, param in net.state_dict().items():
        found = loaded.get(param.name) or loaded.get(f"{param.name}_0")
        if found is None or tuple(found.shape) != tuple(param.shape):
            raise TrainError(f"--init-from {model_dir}: the export has no weight {key} "
                             f"({param.name}, shape {list(param.shape)}); is it this model?")
        state[key] = found.numpy()
    net.set_state_dict(state)


def file_sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def latest_checkpoint(ckpt_dir):
    found = sorted(ckpt_dir.glob("ckpt-*.pdckpt"))
    return found[-1] if found else None


def weights_key(args, dataset_digest, world):
    """What decides the trained weights: data, hyperparameters, workers and the code
    (every .py here). Serving-only flags (--drill-*) and paths are not part of it."""
    code = hashlib.sha256()
    for path in sorted(HERE.glob("*.py")):
        code.update(path.name.encode() + b"\0" + path.read_bytes())
    # --checkpoint-every too: each checkpoint averages BatchNorm statistics across ranks.
    inputs = {"dataset": dataset_digest, "epochs": args.epochs, "batch_size": args.batch_size,
              "lr": args.lr, "max_steps": args.max_steps, "subset": args.subset,
              "seed": args.seed, "world": world, "checkpoint_every": args.checkpoint_every,
              "code": code.hexdigest()}
    if args.init_from:  # other starting weights, other result
        inputs["init_from"] = file_sha256(pathlib.Path(args.init_from) / "inference.pdiparams")
    canonical = json.dumps(inputs, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def store_in_cache(cache_dir, key, checkpoint):
    """Copy a finished run's final checkpoint into the cache (atomic: whole or absent)."""
    import shutil

    target = cache_dir / key / "final.pdckpt"
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".final.{os.getpid()}.tmp")
    shutil.copyfile(checkpoint, tmp)
    os.replace(tmp, target)
    print(f"weights cache: stored {key}", flush=True)


def infer_cfg(output_names, categories, stride=8):
    """The serving-side description of the export (written as infer_cfg.yml)."""
    meanings = {
        "heatmap": "per-class centre probability, sigmoid applied, [N, C, H/s, W/s]",
        "size": "box width, height in output-grid cells (x stride = pixels), [N, 2, H/s, W/s]",
        "offset": "sub-cell centre offset dx, dy in cells, [N, 2, H/s, W/s] (s = stride)",
    }
    return {
        "model": MODEL_NAME,
        "architecture": f"CenterNet-style, anchor-free, stride {stride}",
        "input": {"name": "image", "shape": [-1, 3, 128, 128], "dtype": "float32",
                  "size": [128, 128], "layout": "NCHW", "channel_order": "RGB",
                  "scale": "1/255", "mean": MEAN, "std": STD,
                  "formula": "(pixel / 255 - mean) / std"},
        "outputs": [{"name": role, "tensor": tensor, "meaning": meanings[role],
                     "shape": [-1, len(categories) if role == "heatmap" else 2,
                               128 // stride, 128 // stride]}
                    for role, tensor in zip(("heatmap", "size", "offset"), output_names)],
        "labels": [{"index": i, "id": c["id"], "name": c["name"]}
                   for i, c in enumerate(categories)],
        "decode": dict(DECODE, stride=stride,
                       postprocess="postprocess.decode (numpy): 3x3 max-pool peaks, "
                       "top_k, score > score_threshold; bbox = [(x+dx-w/2)*stride, "
                       "(y+dy-h/2)*stride, w*stride, h*stride]"),
    }


def drill_fault(delay_ms=0.0, error_rate=0.0, error_status=500):
    """The infer_cfg.yml ``fault:`` section for the --drill-* flags; None when there is no drill.

    All three keys, as plain floats/int, so the same drill always serialises
    the same way (the version is derived from it).
    """
    if not (delay_ms or error_rate):
        return None
    return {"delay_ms": float(delay_ms), "error_rate": float(error_rate),
            "error_status": int(error_status)}


SKEWS = ("none", "no-scale", "mean-std", "bgr")


def skewed_input(section, skew):
    """infer_cfg.yml's ``input:`` with the --drill-skew mistake made on purpose."""
    if skew == "no-scale":
        return dict(section, scale=1.0)
    if skew == "mean-std":
        return dict(section, mean=section["std"], std=section["mean"])
    if skew == "bgr":
        return dict(section, channel_order="BGR" if section["channel_order"] == "RGB" else "RGB")
    return section


def model_version(weights_sha, fault=None):
    """``v-`` + 12 hex: of the weights' sha256, or, with a drill, of sha256(weights sha + drill).

    A drill may be declared on the very weights production serves (the demo's
    slow candidate), and two versions must never share a name; a clean export
    keeps the plain weights-derived version.
    """
    if fault is None:
        return "v-" + weights_sha[:12]
    canonical = json.dumps(fault, sort_keys=True, separators=(",", ":"))
    return "v-" + hashlib.sha256((weights_sha + canonical).encode()).hexdigest()[:12]


def run_exported(model_dir, images, cfg_without_names, batch=50):
    """Predict with the exported files through paddle.inference; returns (names, outputs list)."""
    from paddle import inference
    config = inference.Config(str(model_dir / "inference.json"),
                              str(model_dir / "inference.pdiparams"))
    config.disable_gpu()
    config.set_cpu_math_library_num_threads(1)
    config.disable_glog_info()
    predictor = inference.create_predictor(config)
    in_handle = predictor.get_input_handle(predictor.get_input_names()[0])
    names = predictor.get_output_names()
    collected = {n: [] for n in names}
    for start in range(0, len(images), batch):
        x = preprocess(images[start:start + batch], cfg_without_names)
        in_handle.reshape(list(x.shape))
        in_handle.copy_from_cpu(x)
        predictor.run()
        for n in names:
            collected[n].append(predictor.get_output_handle(n).copy_to_cpu())
    return names, {n: np.concatenate(v) for n, v in collected.items()}


def atomic_text(path, text):
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def train(args):
    import paddle
    import paddle.distributed as dist
    from model import ShapesNet, build_targets, count_parameters, detection_loss

    world = int(os.environ.get("PADDLE_TRAINERS_NUM", "1"))
    rank = int(os.environ.get("PADDLE_TRAINER_ID", "0"))
    paddle.set_device("cpu")
    if world > 1:
        dist.init_parallel_env()
        rank, world = dist.get_rank(), dist.get_world_size()
    if args.batch_size % world:
        raise TrainError(f"--batch-size {args.batch_size} is not divisible by {world} ranks")

    out_dir = pathlib.Path(args.output_dir)
    ckpt_dir = pathlib.Path(args.checkpoint_dir)
    for d, flag in ((out_dir, "--output-dir"), (ckpt_dir, "--checkpoint-dir")):
        try:
            d.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise TrainError(f"cannot create {flag} {d}: {exc.strerror}") from None

    metrics = Metrics(int(os.environ.get("MLOPS_METRICS_PORT", "0") or 0), rank)
    try:
        if not shapes_data.has_dataset(args.data_dir):
            raise TrainError(
                f"no dataset in --data-dir {args.data_dir} (annotations/train.json and "
                "annotations/val.json with images/, as prepare-data lays out a pin); make one "
                f"with `python shapes_data.py --data-dir {args.data_dir}`")
        digest = shapes_data.dataset_digest(args.data_dir)
        images, coco, entries = shapes_data.load_split(args.data_dir, "train",
                                                       args.subset or None)
        boxes = boxes_by_image(coco, entries)
        categories = coco["categories"]
        cfg = infer_cfg(["?"] * 3, categories)

        paddle.seed(args.seed)
        net = ShapesNet(num_classes=len(categories))
        model = paddle.DataParallel(net) if world > 1 else net
        opt = paddle.optimizer.AdamW(learning_rate=args.lr, parameters=model.parameters(),
                                     weight_decay=1e-4)
        n = len(images)
        spe = n // args.batch_size
        if spe < 1:
            raise TrainError(f"{n} training images cannot fill one batch of {args.batch_size}")
        total = args.epochs * spe
        if args.max_steps:
            total = min(total, args.max_steps)

        step = 0
        latest = latest_checkpoint(ckpt_dir)
        cache_dir = pathlib.Path(args.weights_cache) if args.weights_cache else None
        key = weights_key(args, digest, world) if cache_dir else ""
        from_cache = False
        if (
            latest is None
            and cache_dir is not None
            and (cache_dir / key / "final.pdckpt").is_file()
        ):
            latest, from_cache = cache_dir / key / "final.pdckpt", True
            if rank == 0:
                print(f"weights cache: {key} holds this run's weights (same data, "
                      "hyperparameters, workers and code); exporting them", flush=True)
        if latest is None and args.init_from:
            load_init_weights(net, args.init_from)
            print(f"init from {args.init_from} (fine-tuning its weights)", flush=True)
        if latest is not None:
            state = paddle.load(str(latest))
            meta = state["meta"]
            if (meta.get("global_batch"), meta.get("images")) != (args.batch_size, n):
                raise TrainError(
                    f"checkpoint {latest} was written for --batch-size {meta.get('global_batch')} "
                    f"over {meta.get('images')} images, this run has {args.batch_size} over {n}; "
                    f"use a fresh --checkpoint-dir")
            net.set_state_dict(state["model"])
            opt.set_state_dict(state["optimizer"])
            step = int(state["meta"]["step"])
            print(f"resumed from {latest.name} at step={step} "
                  f"(loss={state['meta'].get('loss', float('nan')):.4f})", flush=True)
        if rank == 0:
            print(f"config: world={world} images={n} steps_per_epoch={spe} total_steps={total} "
                  f"global_batch={args.batch_size} params={count_parameters(net)} "
                  f"dataset={digest}", flush=True)

        def sync_buffers():
            if world == 1:
                return
            # Paddle keeps BN running statistics as non-trainable *parameters*
            # (not buffers), and DataParallel only all-reduces gradients.
            for _name, stat in net.named_parameters():
                if stat.stop_gradient:
                    dist.all_reduce(stat)
                    stat.set_value(stat / world)

        def save_checkpoint(step, loss):
            sync_buffers()
            if rank != 0:
                return
            path = ckpt_dir / f"ckpt-{step:08d}.pdckpt"
            tmp = ckpt_dir / f".ckpt-{step:08d}.tmp"
            meta = {"step": step, "epoch": step // spe, "loss": float(loss), "seed": args.seed,
                    "world": world, "global_batch": args.batch_size, "images": n}
            paddle.save({"model": net.state_dict(), "optimizer": opt.state_dict(),
                         "meta": meta}, str(tmp))
            os.replace(tmp, path)
            for old in sorted(ckpt_dir.glob("ckpt-*.pdckpt"))[:-2]:
                old.unlink(missing_ok=True)

        model.train()
        out_size = images.shape[1] // net.stride
        window_start, window_images, loss_value = time.time(), 0, float("nan")
        while step < total:
            idx, flips = batch_indices(step, spe, n, args.batch_size, args.seed, rank, world)
            x, bxs = make_batch(images, boxes, idx, flips, cfg)
            targets = [paddle.to_tensor(t) for t in
                       build_targets(bxs, len(categories), out_size, net.stride)]
            opt.set_lr(lr_at(step, total, args.lr))
            loss, _parts = detection_loss(model(paddle.to_tensor(x)), targets)
            loss.backward()
            opt.step()
            opt.clear_grad()
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
                elapsed = max(time.time() - window_start, 1e-9)
                speed = window_images / elapsed
                if rank == 0:
                    print(f"step={step} epoch={epoch} loss={loss_value:.4f} "
                          f"images/s={speed * world:.1f} lr={lr_at(step - 1, total, args.lr):.5f}",
                          flush=True)
                window_start, window_images = time.time(), 0
            metrics.update(step, epoch, loss_value if logged else None, speed)
            if step % args.checkpoint_every == 0 or step % spe == 0 or step == total:
                save_checkpoint(step, float(loss))

        if cache_dir is not None and not from_cache and rank == 0 and step == total:
            store_in_cache(cache_dir, key, latest_checkpoint(ckpt_dir))
        sync_buffers()
        net.eval()
        state = net.state_dict()
        weights = weights_digest(state)
        atomic_text(out_dir / f"rank-{rank}.sha256", weights + "\n")
        if rank == 0:
            export(net, args, out_dir, categories, digest, total, world)
        print(f"done: rank={rank} step={step} weights_sha256={weights}", flush=True)
    finally:
        metrics.close()


def export(net, args, out_dir, categories, digest, total, world):
    """jit.save the net, write infer_cfg.yml + model.yaml, then bbox.json via the export."""
    import paddle
    from paddle.static import InputSpec

    model_dir = out_dir / "model"
    model_dir.mkdir(parents=True, exist_ok=True)
    paddle.jit.save(net, str(model_dir / "inference"),
                    input_spec=[InputSpec([None, 3, 128, 128], "float32", name="image")])
    val_images, val_coco, val_entries = shapes_data.load_split(args.data_dir, "val")
    names, raw = run_exported(model_dir, val_images, infer_cfg(["?"] * 3, categories))
    cfg = infer_cfg(names, categories, net.stride)
    fault = drill_fault(args.drill_delay_ms, args.drill_error_rate, args.drill_error_status)
    served_cfg = cfg if fault is None else dict(cfg, fault=fault)
    if args.drill_skew != "none":  # bbox.json below still uses `cfg`: the gate sees nothing
        served_cfg = dict(served_cfg, input=skewed_input(cfg["input"], args.drill_skew))
    drill = {**(fault or {}), **({"skew": args.drill_skew} if args.drill_skew != "none" else {})}
    fault = drill or None  # the version and the lineage name every declared misbehaviour
    atomic_text(model_dir / "infer_cfg.yml", yaml.safe_dump(served_cfg, sort_keys=False))

    weights_sha = file_sha256(model_dir / "inference.pdiparams")
    model_yaml = {
        "name": MODEL_NAME,
        "version": model_version(weights_sha, fault),
        "weights_sha256": weights_sha,
        "training_commit": os.environ.get("MLOPS_TRAINING_COMMIT", ""),
        "workflow_id": os.environ.get("MLOPS_WORKFLOW_ID", ""),
        "dataset_digest": digest,
        "hyperparameters": {"epochs": args.epochs, "batch_size": args.batch_size,
                            "lr": args.lr, "max_steps": args.max_steps, "subset": args.subset,
                            "seed": args.seed, "steps": total, "workers": world},
        "paddle_version": paddle.__version__,
        "format": {"program": "inference.json", "params": "inference.pdiparams",
                   "config": "infer_cfg.yml", "postprocess": "postprocess.decode"},
    }
    if fault is not None:  # in the lineage too, so the PR's report says this is a drill
        model_yaml["drill"] = fault
    atomic_text(model_dir / "model.yaml", yaml.safe_dump(model_yaml, sort_keys=False))

    detections = decode(raw, cfg)
    bbox = [dict(image_id=entry["id"], **det)
            for entry, dets in zip(val_entries, detections) for det in dets]
    atomic_text(out_dir / "bbox.json", json.dumps(bbox))
    print(f"exported {model_yaml['version']} to {model_dir}; {len(bbox)} val detections "
          f"in {out_dir / 'bbox.json'}", flush=True)
    if fault is not None:
        print(f"drill declared in infer_cfg.yml: {json.dumps(fault)}", flush=True)


def main(argv=None):
    try:
        train(parse_args(argv))
    except (TrainError, shapes_data.DatasetError) as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return exc.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
