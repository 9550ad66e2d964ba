"""Search strategies: given what was evaluated (history) and what is in flight (pending), propose
the next q configs. Stateless between calls: every answer is a function of the seed, the history and
the pending configs, so a study resumed from its ledger proposes what it would have proposed.

- grid: the space's grid in order, then nothing (fewer than q, then an empty list).
- random: the i-th proposal of a study is drawn from Random(seed, i), i = configs seen so far.
- mbo: mlrMBO's recipe: a random initial design, then a random forest fitted on the finished
  evaluations (mean and spread over its trees) and qLCB: each of the q points minimises
  mean - lambda x sd with its own lambda ~ Exponential(lambda_mean), over random candidates plus
  perturbations of the best configs seen (docs/study.md says why this and not TPE or a GP).

No searcher ever proposes a config (by ``Space.key``) already in history or pending, or twice.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kit.errors import KitError
from kit.study import missing_study_extra
from kit.study.space import Value
from kit.study.spec import StudySpec

# random draws per proposal before a (finite, nearly exhausted) space counts as spent
MAX_DRAWS = 200


@dataclass(frozen=True)
class Observation:
    """One finished evaluation: its config and its objective value (None: the evaluation failed)."""

    config: Mapping[str, Value]
    value: float | None


class Searcher:
    """Proposes configs; subclasses implement ``_propose``."""

    def __init__(self, spec: StudySpec) -> None:
        self.spec, self.space = spec, spec.space

    @property
    def size(self) -> int | None:
        """How many configs this searcher can ever propose (None: unbounded)."""
        return None

    def ask(
        self, history: Sequence[Observation], pending: Sequence[Mapping[str, Value]], q: int
    ) -> list[dict]:
        """Up to ``q`` new configs, none in history or pending, none twice; fewer when spent."""
        if q < 0:
            raise KitError(f"asked for {q} configs", fix="ask for 0 or more")
        seen = {self.space.key(o.config) for o in history} | {self.space.key(c) for c in pending}
        return self._propose(list(history), len(history) + len(pending), seen, q)

    def _propose(self, history: list[Observation], count: int, seen: set, q: int) -> list[dict]:
        raise NotImplementedError

    def _random(self, count: int, seen: set, q: int) -> list[dict]:
        """``q`` new random configs: the i-th config of the study from Random(f"{seed}/{i}")."""
        out = []
        for i in range(count, count + q):
            rng = random.Random(f"{self.spec.seed}/{i}")
            for _ in range(MAX_DRAWS):
                config = self.space.sample(rng)
                key = self.space.key(config)
                if key not in seen:
                    seen.add(key)
                    out.append(config)
                    break
            else:
                break
        return out


class GridSearcher(Searcher):
    def __init__(self, spec: StudySpec) -> None:
        super().__init__(spec)
        self.points = self.space.grid(spec.strategy.points)

    @property
    def size(self) -> int:
        return len(self.points)

    def _propose(self, history: list[Observation], count: int, seen: set, q: int) -> list[dict]:
        out: list[dict] = []
        for config in self.points:
            if len(out) == q:
                break
            if self.space.key(config) not in seen:
                out.append(dict(config))
        return out


class RandomSearcher(Searcher):
    def _propose(self, history: list[Observation], count: int, seen: set, q: int) -> list[dict]:
        return self._random(count, seen, q)


class MboSearcher(Searcher):
    """Random-forest surrogate with the qLCB batch infill criterion (mlrMBO's defaults)."""

    def __init__(self, spec: StudySpec) -> None:
        super().__init__(spec)
        try:
            import numpy  # noqa: F401
            import sklearn.ensemble  # noqa: F401
        except ModuleNotFoundError as exc:
            raise missing_study_extra(exc, "the mbo strategy") from None
        settings = spec.strategy
        self.initial = settings.initial or max(4, 2 * len(self.space.params))

    def _losses(self, history: list[Observation]) -> tuple[list[Mapping[str, Value]], list[float]]:
        """Configs and losses to fit: failed evaluations (no value, or NaN/Inf) imputed as the worst
        loss seen (a region that fails is as bad as the worst that ran, never better)."""

        def ok(o: Observation) -> bool:
            return o.value is not None and math.isfinite(o.value)

        done = [
            (o.config, self.spec.objective.loss(o.value))
            for o in history
            if o.value is not None and ok(o)
        ]
        if not done:
            return [], []
        worst = max(loss for _, loss in done)
        failed = [(o.config, worst) for o in history if not ok(o)]
        configs, losses = zip(*(done + failed))
        return list(configs), list(losses)

    def surrogate(self, history: Sequence[Observation]) -> Any:
        """The forest fitted on ``history`` (None with fewer than 2 finished evaluations)."""
        from sklearn.ensemble import RandomForestRegressor

        configs, losses = self._losses(list(history))
        if len(configs) < 2:
            return None
        # SMAC's forest settings (5/6 of the features per split, leaves of 3): trees that disagree
        # away from the data, so their spread says where the surrogate does not know.
        forest = RandomForestRegressor(
            n_estimators=self.spec.strategy.trees,
            max_features=5 / 6,
            min_samples_split=3,
            min_samples_leaf=3,
            random_state=(self.spec.seed * 7919 + len(history)) % 2**32,
        )
        return forest.fit([self.space.encode(c) for c in configs], losses)

    def predict(
        self, history: Sequence[Observation], configs: Sequence[Mapping[str, Value]]
    ) -> list[tuple[float, float]]:
        """The surrogate's (mean, sd) of the objective (in its own direction) at ``configs``, fitted
        on ``history``: what a report sets beside the observed values. Empty without a surrogate."""
        import numpy as np

        forest = self.surrogate(history)
        if forest is None or not configs:
            return []
        mean, sd = _spread(forest, np.array([self.space.encode(c) for c in configs]))
        sign = 1.0 if self.spec.objective.direction == "minimize" else -1.0
        return [(sign * float(m), float(s)) for m, s in zip(mean, sd)]

    def _propose(self, history: list[Observation], count: int, seen: set, q: int) -> list[dict]:
        import numpy as np

        n_random = max(0, min(q, self.initial - count))
        out = self._random(count, seen, n_random)
        forest = self.surrogate(history) if len(out) < q else None
        if forest is None:
            return out + self._random(count + len(out), seen, q - len(out))
        settings = self.spec.strategy
        rng = random.Random(f"{self.spec.seed}/mbo/{count}")
        configs, losses = self._losses(history)
        best = [configs[i] for i in np.argsort(losses, kind="stable")[:5]]
        candidates = [self.space.sample(rng) for _ in range(settings.candidates)]
        candidates += [
            self.space.perturb(best[i % len(best)], rng, sigma=0.1 if i % 2 else 0.03)
            for i in range(settings.local)
        ]
        keyed = {}
        for c in candidates:
            key = self.space.key(c)
            if key not in seen and key not in keyed:
                keyed[key] = c
        if not keyed:
            return out + self._random(count + len(out), seen, q - len(out))
        keys, pool = list(keyed), list(keyed.values())
        mean, sd = _spread(forest, np.array([self.space.encode(c) for c in pool]))
        taken = np.zeros(len(pool), dtype=bool)
        while len(out) < q and not taken.all():
            lam = rng.expovariate(1.0 / settings.lambda_mean) if settings.lambda_mean > 0 else 0.0
            score = np.where(taken, np.inf, mean - lam * sd)
            i = int(np.argmin(score))
            taken[i] = True
            seen.add(keys[i])
            out.append(pool[i])
        return out


def _spread(forest: Any, x: Any) -> tuple[Any, Any]:
    """Mean and standard deviation of the trees' predictions at ``x``."""
    import numpy as np

    per_tree = np.stack([tree.predict(x) for tree in forest.estimators_])
    return per_tree.mean(axis=0), per_tree.std(axis=0)


SEARCHERS = {"grid": GridSearcher, "random": RandomSearcher, "mbo": MboSearcher}


def make_searcher(spec: StudySpec) -> Searcher:
    """The searcher the study file's strategy names."""
    return SEARCHERS[spec.strategy.kind](spec)
