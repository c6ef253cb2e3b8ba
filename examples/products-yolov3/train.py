"""Train, checkpoint, export: the product-shelf YOLOv3's one entrypoint (the pipeline's contract).

    python train.py --output-dir OUT --checkpoint-dir CKPT [--data-dir data] [--epochs N]
        [--batch-size B] [--lr LR] [--max-steps N] [--subset N] [--seed S] [--log-every N]
        [--drill-delay-ms MS] [--drill-error-rate R] [--drill-error-status 500|503]
        [--drill-skew none|no-scale|mean-std]
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
* Rank 0 exports with ``paddle.jit.save`` to ``OUT/model/inference.{json,pdiparams}``
  in PaddleDetection's format (inputs ``image``, ``im_shape``, ``scale_factor``;
  ``yolo_box`` + ``multiclass_nms3`` in the graph; outputs ``bbox``, ``bbox_num``),
  writes PaddleDetection's ``infer_cfg.yml`` and ``model.yaml``, then runs the
  *exported* model with ``paddle.inference`` over the val set, preprocessed as
  ``infer_cfg.yml`` says (``preprocess.py``), into ``OUT/bbox.json`` (COCO detections).
* ``--drill-*`` declare a fault drill: the export's ``infer_cfg.yml`` gets a
  ``fault:`` section (the server then slows or fails that share of requests
  on purpose, to rehearse a canary rollback) and ``model.yaml`` a ``drill:``
  record. Training itself is unchanged; the version is not (see
  ``model_version``), so a drill never shares a version with its clean twin.
  ``--drill-skew`` instead exports ``infer_cfg.yml`` with a serving-side
  mistake (NormalizeImage's ``is_scale`` off, so pixels are not divided by
  255, or its mean and std swapped): the gate's mAP is
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

import shelf_data  # noqa: E402
from preprocess import create_inputs, preprocess  # noqa: E402

MODEL_NAME = "products-yolov3"
EPOCHS = 16
LR = 3e-3
MEAN = [0.485, 0.456, 0.406]  # PaddleDetection's (ImageNet) normalisation
STD = [0.229, 0.224, 0.225]


class TrainError(Exception):
    """Bad input or an unusable directory; printed as one line, exit code 2."""

    exit_code = 2


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="Train the product-shelf YOLOv3 detector.")
    p.add_argument("--output-dir", required=True, help="export + bbox.json go here")
    p.add_argument("--checkpoint-dir", required=True, help="checkpoints; resumed from")
    p.add_argument("--data-dir", default="data",
                   help="the dataset: the pipeline passes the one prepare-data verified from "
                   "the repo's pins (annotations/<split>.json, images/); by hand, make one with "
                   "shelf_data.py")
    p.add_argument("--epochs", type=int, default=EPOCHS)
    p.add_argument("--batch-size", type=int, default=32, help="global batch, split over ranks")
    p.add_argument("--lr", type=float, default=LR, help="peak AdamW learning rate")
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
                       "no-scale turns NormalizeImage's is_scale off (0..255 pixels), "
                       "mean-std swaps its mean and std")
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


def make_batch(images, boxes, idx, flips, ops, size):
    """Preprocessed NCHW batch (flipped where ``flips``) and yolo_loss's padded targets:
    gt_box [B, MAX_BOXES, 4] (cx, cy, w, h) / size, gt_label [B, MAX_BOXES] int32."""
    from model import MAX_BOXES

    batch = np.empty((len(idx), 3, size, size), np.float32)
    gt_box = np.zeros((len(idx), MAX_BOXES, 4), np.float32)
    gt_label = np.zeros((len(idx), MAX_BOXES), np.int32)
    for j, i in enumerate(idx):
        im, b = images[i], boxes[i][:MAX_BOXES].copy()
        if flips[j]:
            im = im[:, ::-1]
            b[:, 1] = size - b[:, 1] - b[:, 3]
        batch[j] = preprocess(np.ascontiguousarray(im), ops)[0]
        gt_label[j, :len(b)] = b[:, 0].astype(np.int32) - 1  # category id -> class index
        gt_box[j, :len(b)] = np.stack([b[:, 1] + b[:, 3] / 2, b[:, 2] + b[:, 4] / 2,
                                       b[:, 3], b[:, 4]], axis=1) / size
    return batch, gt_box, gt_label


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
    """Set `net`'s weights from an export (`paddle.jit.save` of it, wrapped with its head).

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


def infer_cfg(categories, size):
    """PaddleDetection's ``infer_cfg.yml`` (``_dump_infer_config``) for this export."""
    return {
        "mode": "paddle",
        "draw_threshold": 0.5,
        "metric": "COCO",
        "use_dynamic_shape": False,
        "arch": "YOLO",
        "min_subgraph_size": 3,
        "Preprocess": [
            {"interp": 2, "keep_ratio": False, "target_size": [size, size], "type": "Resize"},
            {"is_scale": True, "mean": list(MEAN), "norm_type": "mean_std", "std": list(STD),
             "type": "NormalizeImage"},
            {"type": "Permute"},
        ],
        "label_list": [c["name"] for c in categories],
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


SKEWS = ("none", "no-scale", "mean-std")


def skewed_cfg(cfg, skew):
    """infer_cfg.yml with the --drill-skew mistake made on purpose."""
    mistakes = {"no-scale": lambda op: dict(op, is_scale=False),
                "mean-std": lambda op: dict(op, mean=op["std"], std=op["mean"])}
    if skew not in mistakes:
        return cfg
    ops = [mistakes[skew](op) if op["type"] == "NormalizeImage" else op
           for op in cfg["Preprocess"]]
    return dict(cfg, Preprocess=ops)


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


def run_exported(model_dir, images, ops, batch=50):
    """The exported program's detections through paddle.inference, as upstream's
    ``Detector.predict``: one (bbox [M, 6], bbox_num [N]) pair per batch, concatenated."""
    from paddle import inference

    config = inference.Config(str(model_dir / "inference.json"),
                              str(model_dir / "inference.pdiparams"))
    config.disable_gpu()
    config.set_cpu_math_library_num_threads(1)
    config.disable_glog_info()
    predictor = inference.create_predictor(config)
    names = predictor.get_output_names()
    bboxes, nums = [], []
    for start in range(0, len(images), batch):
        feeds = create_inputs(list(images[start:start + batch]), ops)
        for name in predictor.get_input_names():
            handle = predictor.get_input_handle(name)
            handle.reshape(list(feeds[name].shape))
            handle.copy_from_cpu(feeds[name])
        predictor.run()
        bboxes.append(predictor.get_output_handle(names[0]).copy_to_cpu())
        nums.append(predictor.get_output_handle(names[1]).copy_to_cpu())
    return np.concatenate(bboxes), np.concatenate(nums)


def coco_detections(bbox, bbox_num, entries, categories):
    """COCO result rows from the export's (class, score, x1, y1, x2, y2) rows."""
    out, start = [], 0
    for entry, count in zip(entries, bbox_num.tolist()):
        for cls, score, x1, y1, x2, y2 in bbox[start:start + count].tolist():
            out.append({"image_id": entry["id"], "category_id": categories[int(cls)]["id"],
                        "bbox": [round(x1, 3), round(y1, 3), round(x2 - x1, 3),
                                 round(y2 - y1, 3)],
                        "score": round(score, 5)})
        start += count
    return out


def atomic_text(path, text):
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def train(args):
    import paddle
    import paddle.distributed as dist
    from model import INPUT_SIZE, YOLOv3Small, count_parameters, yolo_losses

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
        if not shelf_data.has_dataset(args.data_dir):
            raise TrainError(
                f"no dataset in --data-dir {args.data_dir} (annotations/train.json and "
                "annotations/val.json with images/, as prepare-data lays out a pin); make one "
                f"with `python shelf_data.py --data-dir {args.data_dir}`")
        digest = shelf_data.dataset_digest(args.data_dir)
        images, coco, entries = shelf_data.load_split(args.data_dir, "train",
                                                       args.subset or None)
        boxes = boxes_by_image(coco, entries)
        categories = coco["categories"]
        ops = infer_cfg(categories, INPUT_SIZE)["Preprocess"]
        if images.shape[1:3] != (INPUT_SIZE, INPUT_SIZE):
            raise TrainError(f"training images are {images.shape[1:3]}, the net takes "
                             f"{INPUT_SIZE}x{INPUT_SIZE}")

        paddle.seed(args.seed)
        net = YOLOv3Small(num_classes=len(categories))
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
        window_start, window_images, loss_value = time.time(), 0, float("nan")
        while step < total:
            idx, flips = batch_indices(step, spe, n, args.batch_size, args.seed, rank, world)
            x, gt_box, gt_label = make_batch(images, boxes, idx, flips, ops, INPUT_SIZE)
            opt.set_lr(lr_at(step, total, args.lr))
            loss, _parts = yolo_losses(model(paddle.to_tensor(x)), paddle.to_tensor(gt_box),
                                       paddle.to_tensor(gt_label), len(categories))
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
    """jit.save net + yolo_box + NMS, write infer_cfg.yml + model.yaml, then bbox.json."""
    import paddle
    from model import INPUT_SIZE, YOLOv3Export
    from paddle.static import InputSpec

    model_dir = out_dir / "model"
    model_dir.mkdir(parents=True, exist_ok=True)
    wrapped = YOLOv3Export(net)
    wrapped.eval()
    paddle.jit.save(wrapped, str(model_dir / "inference"), input_spec=[
        InputSpec([None, 3, None, None], "float32", name="image"),
        InputSpec([None, 2], "float32", name="im_shape"),
        InputSpec([None, 2], "float32", name="scale_factor"),
    ])
    cfg = infer_cfg(categories, INPUT_SIZE)
    val_images, _val_coco, val_entries = shelf_data.load_split(args.data_dir, "val")
    bbox_rows, bbox_num = run_exported(model_dir, val_images, cfg["Preprocess"])
    fault = drill_fault(args.drill_delay_ms, args.drill_error_rate, args.drill_error_status)
    served_cfg = cfg if fault is None else dict(cfg, fault=fault)
    # bbox.json below still uses `cfg`: the gate sees nothing of a skew
    served_cfg = skewed_cfg(served_cfg, args.drill_skew)
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
                   "config": "infer_cfg.yml",
                   "postprocess": "in the graph (yolo_box + multiclass_nms3), PaddleDetection's"},
    }
    if fault is not None:  # in the lineage too, so the PR's report says this is a drill
        model_yaml["drill"] = fault
    atomic_text(model_dir / "model.yaml", yaml.safe_dump(model_yaml, sort_keys=False))

    bbox = coco_detections(bbox_rows, bbox_num, val_entries, categories)
    atomic_text(out_dir / "bbox.json", json.dumps(bbox))
    print(f"exported {model_yaml['version']} to {model_dir}; {len(bbox)} val detections "
          f"in {out_dir / 'bbox.json'}", flush=True)
    if fault is not None:
        print(f"drill declared in infer_cfg.yml: {json.dumps(fault)}", flush=True)


def main(argv=None):
    try:
        train(parse_args(argv))
    except (TrainError, shelf_data.DatasetError) as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return exc.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
