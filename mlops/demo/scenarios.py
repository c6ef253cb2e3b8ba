"""What the demo pushes: one readable change to the model repo per scenario.

Every scenario is an edit of `training.full.overrides.args` in the model
repo's `mlops.yaml`, or (good and bad-labels, for an example whose data is
pinned) a new week's dataset pin, committed with a message that says what it does, so
`git log -p` in the model repo shows exactly why a candidate is good or bad.
The bad behaviours are the example's own flags (`train.py --drill-*`, which
the exported model declares in `infer_cfg.yml`: a delay, errors, or a
serving-side preprocessing mistake; and fewer epochs); nothing
in the controller or the platform knows which scenario is playing.
"""

import copy
import dataclasses
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from promotion.decision.state import CanaryState

Outcome = Literal["promoted", "rolled_back", "gate_refused", "pipeline_failed"]

NAMES = ("good", "slow", "errors", "skew", "bad-labels", "low-map")


@dataclasses.dataclass(frozen=True)
class Scenario:
    """One push after the first: its change, its commit message, what should happen."""

    name: str
    change: dict[str, Any]  # merged into the production push's training args
    message: str
    expect: Outcome
    expect_cause: str = ""  # a word the rollback or gate reason contains (latency, error)
    week: int = 0  # > 0: this push pins that week's data (`mlops data snapshot`)
    expect_classes: tuple[str, ...] = ()  # classes the gate must name as worse beyond noise

    def args(self, production_args: dict[str, Any]) -> dict[str, Any]:
        """The full job's args for this push: production's plus this change."""
        return {**production_args, **self.change}


@dataclasses.dataclass(frozen=True)
class Example:
    """A model repo under `examples/` the demo can play: its directory and model name
    (the same), its `train.py`'s default epochs (the first push trains those), and the
    serving-side mistake (`--drill-skew`) its skew scenario exports.

    The mistake is the example's own because models fail differently on the same
    one (measured on 200 val images of each, the live quality checks' signals):
    the shapes detector fed 0..255 pixels answers 87.5 % of images with no
    detection, but with mean and std swapped only 5 % (0 % for its clean twin),
    the policy's own harmless margin (`min_difference`), so its rollback was a
    coin flip; the YOLOv3 with mean and std swapped answers 11 % of images with
    no detection (1.5 % clean), while fed 0..255 pixels it sees 17 products an
    image at score 1.0, which no quality check calls poor.
    """

    name: str
    epochs: int
    skew: str
    skew_what: str
    fine_tune: dict[str, Any] | None = None
    """The weekly retrain's args when the example's mlops.yaml says `training.init_from:
    production` (a short fine-tune of production); None: from scratch as the first version."""
    generator: str = ""  # its data generator (weeks of data to pin); "": train.py makes data
    week2: str = ""  # what week 2's data brings, for the good push's commit message
    week3: str = ""  # what week 3's data brings (bad labels), for the bad-labels push
    bad_labels: tuple[str, ...] = ()  # the classes week 3 swaps labels between; (): no week 3

    def bootstrap_message(self) -> str:
        return f"{self.name}: first version ({self.epochs} epochs)"

    def good(self) -> "Scenario":
        """The weekly retrain: week 2's data pinned (an example with weeks of data), as a
        short fine-tune of production when the example asks for one; else two epochs more
        than the first version from scratch."""
        if self.generator:
            change = dict(self.fine_tune or {})
            how = (f"; fine-tune production for {change['epochs']} epochs "
                   f"(training.init_from: production)" if change else "")
            return Scenario("good", change, f"data: week 2 arrives ({self.week2}){how}",
                            "promoted", week=2)
        if self.fine_tune is not None:
            return Scenario("good", dict(self.fine_tune),
                            f"fine-tune production for {self.fine_tune['epochs']} epochs "
                            f"(training.init_from: production; the weekly retrain)", "promoted")
        more = self.epochs + 2
        return Scenario("good", {"epochs": more},
                        f"train {more} epochs instead of {self.epochs} (the weekly retrain)",
                        "promoted")

    def bad_labels_scenario(self) -> "Scenario | None":
        """Week 3's data pinned, a batch in which a share of the new labels is swapped
        between two classes, trained as the weekly retrain is (the good push's change):
        training succeeds, but on the holdout (and val) production and the candidate run
        side by side, and the gate finds the candidate worse beyond noise on those two
        classes and names them. None for an example whose generator has no such week.

        The recipe (a 1-epoch fine-tune at lr 2e-3) was chosen by comparing fine-tunes with
        and without the swapped labels as the evaluate step compares them: the swapped
        classes come out worse beyond noise on val and the holdout, while the same fine-tune
        on clean labels is better (the intervals are in this docstring's commit body).
        """
        if not self.bad_labels:
            return None
        change = dict(self.fine_tune or {})
        how = (f"; fine-tune production for {change['epochs']} epochs" if change else "")
        return Scenario("bad-labels", change, f"data: week 3 arrives ({self.week3}){how}",
                        "gate_refused", "significantly worse for", week=3,
                        expect_classes=self.bad_labels)

    def skew_scenario(self) -> "Scenario":
        """A mistake in the exported infer_cfg.yml this example's model visibly fails on."""
        return self.drill(Scenario(
            "skew", {"drill-skew": self.skew},
            f"drill: export infer_cfg.yml {self.skew_what} (train.py --drill-skew "
            f"{self.skew}): the gate runs the export as served, beside production "
            "on the same images, and stops it", "gate_refused", "worse"))

    def drill(self, scenario: "Scenario") -> "Scenario":
        """A drill changes serving flags only. An example that fine-tunes production
        (`init_from: production`) re-exports production's weights for it (`epochs: 0`,
        no training: the drill's flags alone make it a version of its own; the pipeline
        then runs no smoke job and one worker, `workflows.jobplan`); one trained from
        scratch finds the good push's weights in the weights cache (same inputs)."""
        if self.fine_tune is None:
            return scenario
        return dataclasses.replace(
            scenario, change={**scenario.change, "epochs": 0},
            message=f"{scenario.message}; production's weights as they are (epochs: 0): "
                    "no smoke job, one worker")


EXAMPLES = {e.name: e for e in (
    # The fine-tune: benchmarks/warm_start.py (docs/guides/evaluation.md, "Warm start"); one
    # epoch at lr 2e-3 (bad_labels_scenario's docstring says why).
    Example("shapes-detector", 7, "no-scale", "with pixels not divided by 255",
            {"epochs": 1, "lr": 0.002},
            generator="shapes_data.py", week2="250 new images, more triangles; 50 retired",
            week3="400 new images, 3 in 4 of their circle and square labels swapped; "
                  "400 retired", bad_labels=("circle", "square")),
    Example("products-yolov3", 16, "mean-std", "with NormalizeImage's mean and std swapped",
            generator="shelf_data.py", week2="312 new images, more bottles; 62 retired"),
)}
DEFAULT_EXAMPLE = "shapes-detector"


def example(name: str) -> Example:
    """The example called `name`; a ValueError naming the known ones otherwise."""
    if name not in EXAMPLES:
        raise ValueError(f"unknown example {name!r}; choose one of {', '.join(EXAMPLES)}")
    return EXAMPLES[name]


#: The first push: the example as shipped, which becomes the stable version.
BOOTSTRAP_MESSAGE = EXAMPLES[DEFAULT_EXAMPLE].bootstrap_message()

_SLOW = Scenario("slow", {"drill-delay-ms": 250},
                 "drill: this version answers 250 ms late (train.py --drill-delay-ms)",
                 "rolled_back", "latency")
_ERRORS = Scenario("errors", {"drill-error-rate": 0.3},
                   "drill: this version fails 30 % of requests (train.py --drill-error-rate)",
                   "rolled_back", "error")

_LOW_MAP = Scenario(  # from scratch (`init-from: ""`), or it would fine-tune production
    "low-map", {"epochs": 1, "max-steps": 10, "init-from": ""},
    "train 10 steps from scratch to save time (the gate should refuse it); no bigger than "
    "the smoke job, so no smoke job", "gate_refused")


def table(chosen: Example) -> dict[str, Scenario]:
    """Every scenario `chosen` can play, by name (bad-labels only with a week of bad labels)."""
    bad = chosen.bad_labels_scenario()
    return {"good": chosen.good(), "slow": chosen.drill(_SLOW), "errors": chosen.drill(_ERRORS),
            "skew": chosen.skew_scenario(), **({"bad-labels": bad} if bad else {}),
            "low-map": _LOW_MAP}


SCENARIOS = table(EXAMPLES[DEFAULT_EXAMPLE])


def plan(choice: str, example_name: str = DEFAULT_EXAMPLE) -> list[Scenario]:
    """The scenarios to play for `--scenario CHOICE` with an example, in order (`all`: good
    first). The good scenario's epochs follow the example's default."""
    chosen = example(example_name)
    by_name = table(chosen)
    if choice == "all":  # bad-labels only with an example whose data has a bad week
        return [by_name[name] for name in NAMES if name in by_name]
    if choice == "bad-labels" and choice not in by_name:
        raise ValueError(f"scenario bad-labels needs a week with bad labels; the "
                         f"{chosen.name} example's data has none (try shapes-detector)")
    if choice not in by_name:
        raise ValueError(f"unknown scenario {choice!r}; choose one of {', '.join(NAMES)} or all")
    return [by_name[choice]]


def with_args(config: dict[str, Any], args: dict[str, Any]) -> dict[str, Any]:
    """`mlops.yaml` (as a dict) with the full job's override args replaced by `args`."""
    out = copy.deepcopy(config)
    overrides = out.setdefault("training", {}).setdefault("full", {}).setdefault("overrides", {})
    if args:
        overrides["args"] = dict(args)
    else:
        overrides.pop("args", None)
    return out


def outcome_of(run: dict[str, Any] | None, final: "CanaryState | None",
               version: str) -> Outcome | None:
    """What happened to `version`, from the run's outcome and the last promotion.yaml.

    `run` is the pipeline run's `run.json` (status and gate); `final` the model's promotion state
    after the canary (None when no canary ran).
    """
    if run is not None:
        gate = run.get("gate")
        if gate is not None and not gate.get("passed"):
            return "gate_refused"
        if run.get("status") != "Succeeded":
            return "pipeline_failed"
    if final is None:
        return None
    from promotion.decision.state import Phase

    if final.stable == version and final.phase in (Phase.IDLE, Phase.PROMOTED):
        return "promoted"
    if final.candidate == version and final.phase is Phase.ROLLED_BACK:
        return "rolled_back"
    return None
