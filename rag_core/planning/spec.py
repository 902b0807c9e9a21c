"""Sweep spec: one YAML file per sweep, validated on load, expanded into configs.

Every leaf of the stage sections may be a single value or a list; the spec expands into the cartesian
product of its stage settings (settings that a stage ignores, such as `hybrid_alpha` for `vector`
retrieval, do not multiply configs). Errors name the file and the dotted field.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
)

from rag_core.common.fingerprint import fingerprint
from rag_core.data.qa.generation import QAGeneration
from rag_core.planning.ann import AnnIndex

# the settings' models, by where they live; spec.py reads the file as a whole, and their names stay
# importable from here (the project's modules and plug-ins import them so)
from rag_core.planning.config_settings import (  # noqa: F401
    BM25_ANALYZERS,
    COMPONENT_STAGES,
    COMPONENT_USE,
    DEFAULT_COMPRESS_PROMPT,
    DEFAULT_PROMPT,
    OPTIMIZABLE_STAGES,
    PROMPT_COMPONENTS,
    ChunkingConfig,
    EmbeddingConfig,
    GenerationConfig,
    IndexConfig,
    RagConfig,
    RerankConfig,
    RetrievalConfig,
    SpecError,
    Strict,
    component_used,
)
from rag_core.planning.sweep_settings import (  # noqa: F401
    DEFAULT_WEIGHTS,
    MIN_OPTIMIZE_QUESTIONS,
    DataSpec,
    DecisionSpec,
    EvaluationSpec,
    GateSpec,
    OptimizeBudget,
    OptimizeSpec,
    SearchBudget,
    SearchSpec,
    metric_values,
    split_sizes,
)

# ---- the file as written: every leaf may be a list --------------------------------------------


def _as_list(v: Any) -> list:
    return list(v) if isinstance(v, list) else [v]


class SweepFile(Strict):
    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    """The sweep's name: its MLflow experiment, registered model and leaderboard file."""
    description: str = ""
    """Free text."""
    data: DataSpec
    """The corpus and the QA set."""
    chunking: dict[str, Any] | list[dict[str, Any]]
    """How documents are cut into chunks (the settings below); each field may be one value or a list."""
    embedding: dict[str, Any] | list[dict[str, Any]] = Field(
        default_factory=lambda: {"model": "all-MiniLM-L6-v2"}
    )
    """The embedding model; each field may be one value or a list."""
    index: dict[str, Any] | list[dict[str, Any]] = Field(default_factory=dict)
    """Where the index lives and how it analyzes keywords; each field may be one value or a list."""
    retrieval: dict[str, Any] | list[dict[str, Any]]
    """How chunks are retrieved; each field may be one value or a list."""
    rerank: dict[str, Any] | list[dict[str, Any]] = Field(default_factory=lambda: {"method": "none"})
    """How retrieved chunks are reranked; each field may be one value or a list."""
    generation: dict[str, Any] | list[dict[str, Any]] = Field(default_factory=lambda: {"model": "extractive"})
    """How answers are written; each field may be one value or a list."""
    weights: dict[str, float] = Field(default_factory=lambda: dict(DEFAULT_WEIGHTS))
    """metric -> weight: the overall score is the weighted mean of these metrics (any weightable metric,
    the metrics reference, or an installed plug-in's); default 0.3 retrieval (recall@k 0.15, nDCG@k 0.15)
    and 0.7 generation (exact match 0.2, token F1 0.35, faithfulness 0.15)."""
    search: SearchSpec = Field(default_factory=SearchSpec)
    """How the configs to evaluate are chosen."""
    evaluation: EvaluationSpec = Field(default_factory=EvaluationSpec)
    """The LLM judge and its calibration."""
    decision: DecisionSpec = Field(default_factory=DecisionSpec)
    """What the team can ship: limits, preference, the tiers' error rate and the holdout."""
    # the QA set written from the corpus by an LLM into data.qa when that file does not exist yet
    qa_generation: QAGeneration | None = None
    """The QA set written from the corpus by an LLM into `data.qa` when that file does not exist yet."""
    optimize: OptimizeSpec | None = None
    """Prompt optimization (GEPA) of the recommended or top-tier configs."""
    gate: GateSpec = Field(default_factory=GateSpec)
    """The test `rag-sweep gate` and the champion's `not_worse_than_champion` check run."""

    @field_validator("weights")
    @classmethod
    def _weights_valid(cls, v: dict[str, float]) -> dict[str, float]:
        metric_values(v, "weights")
        if any(w < 0 for w in v.values()) or sum(v.values()) <= 0:
            raise ValueError("weights must be non-negative and sum to more than 0")
        return v


class Sweep(BaseModel):
    """A loaded sweep: resolved input paths, weights and the expanded configs."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    name: str
    path: Path
    corpus_path: Path
    qa_path: Path
    max_queries: int | None
    weights: dict[str, float]
    configs: tuple[RagConfig, ...]
    language: str | None = None
    detect_language: bool = False  # data.language: auto (each question's language detected in the QA set)
    judge_model: str | None = None
    evaluation: EvaluationSpec = EvaluationSpec()
    judge_labels: Path | None = None  # resolved; its content's hash is judge_labels_fp
    judge_labels_fp: str | None = None
    judge_prompt: str | None = None  # evaluation.judge_prompt's content, checked on load; None: the built-in
    decision: DecisionSpec = DecisionSpec()
    search: SearchSpec = SearchSpec()
    qa_generation: QAGeneration | None = None
    optimize: OptimizeSpec | None = None
    gate: GateSpec = GateSpec()

    def fingerprint(self) -> str:
        return fingerprint([c.model_dump() for c in self.configs], self.weights)

    @property
    def judge(self):
        """The judge (rag_core/metrics/judge.py JudgeSetting: its model and prompt), None without one."""
        from rag_core.metrics.judge import JUDGE_PROMPT, JudgeSetting

        return JudgeSetting(self.judge_model, self.judge_prompt or JUDGE_PROMPT) if self.judge_model else None


def _expand(section: dict[str, Any] | list, model: type[BaseModel], where: str) -> list:
    """A mapping expands into the product of its list-valued fields; a list of mappings into the union
    of their expansions (to pair settings instead of crossing them)."""
    if isinstance(section, list):
        if not section:
            raise SpecError(f"field '{where}': an empty list selects no setting (give at least one)")
        out = []
        for i, item in enumerate(section):
            out += [x for x in _expand(item, model, f"{where}[{i}]") if x not in out]
        return out
    if not isinstance(section, dict):
        raise SpecError(f"field '{where}': expected a mapping of settings (or a list of them)")
    names = list(section)
    empty = [n for n in names if section[n] == []]
    if empty:
        raise SpecError(f"field '{where}.{empty[0]}': an empty list selects no setting (give at least one)")
    out = []
    for combo in itertools.product(*(_as_list(section[n]) for n in names)):
        try:
            obj = model(**dict(zip(names, combo, strict=True)))
        except ValidationError as e:
            raise SpecError(_format_error(e, where)) from None
        obj = obj.effective() if hasattr(obj, "effective") else obj
        if obj not in out:
            out.append(obj)
    return out


def _format_error(e: ValidationError, where: str) -> str:
    parts = []
    for err in e.errors():
        loc = ".".join(str(p) for p in err["loc"] if not isinstance(p, int))
        field = f"{where}.{loc}" if loc else where
        parts.append(f"field '{field}': {err['msg']}")
    return "; ".join(parts)


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, but a key given twice in one mapping is an error naming its line (the default
    silently keeps the last value)."""

    def construct_mapping(self, node, deep=False):
        seen: dict = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (first on line {seen[key] + 1})", key_node.start_mark
                )
            seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep=deep)


def load_sweep(path: str | Path) -> Sweep:
    """Load and validate a sweep YAML file; raise SpecError naming the file and the field."""
    path = Path(path).resolve()
    try:
        raw = yaml.load(path.read_text(), Loader=_UniqueKeyLoader)
    except FileNotFoundError:
        raise SpecError(f"{path}: sweep spec not found") from None
    except IsADirectoryError:
        raise SpecError(f"{path}: is a directory, not a sweep spec (a .yaml file)") from None
    except (PermissionError, UnicodeDecodeError) as e:
        raise SpecError(f"{path}: cannot be read as a sweep spec: {e}") from None
    except yaml.YAMLError as e:
        raise SpecError(f"{path}: not valid YAML: {e}") from None
    if not isinstance(raw, dict):
        raise SpecError(f"{path}: the sweep spec must be a mapping")
    return sweep_from_dict(raw, path)


def _refuse_nul(value: Any, path: Path, where: str = "") -> None:
    """A NUL byte in any text of the spec (YAML's "\\0"): no path, prompt or model name holds one, and the
    file system's refusal would be a traceback; said in one line naming the field."""
    if isinstance(value, str) and "\x00" in value:
        raise SpecError(f"{path}: field '{where or 'sweep'}': holds a NUL byte ({value!r})")
    if isinstance(value, dict):
        for k, v in value.items():
            _refuse_nul(v, path, f"{where}.{k}" if where else str(k))
    elif isinstance(value, list):
        for v in value:
            _refuse_nul(v, path, where)


def sweep_from_dict(raw: dict[str, Any], path: Path) -> Sweep:
    _refuse_nul(raw, path)
    if "optimize" in raw and raw["optimize"] in (None, {}):  # YAML's `optimize:` alone is null
        raise SpecError(
            f"{path}: field 'optimize': the section is empty; it needs reflection_model (a litellm model "
            "that reads failed answers and proposes prompts; components, configs and budget have defaults), "
            "or leave the section out to optimize nothing"
        )
    try:
        spec = SweepFile(**raw)
    except ValidationError as e:
        raise SpecError(f"{path}: {_format_error(e, 'sweep').replace('sweep.', '')}") from None
    try:
        chunkings = _expand(spec.chunking, ChunkingConfig, "chunking")
        embeddings = _expand(spec.embedding, EmbeddingConfig, "embedding")
        indexes = _expand(spec.index, IndexConfig, "index")
        for i in indexes:
            _check_analyzer_language(i, spec.data.language)
        retrievals = _expand(spec.retrieval, RetrievalConfig, "retrieval")
        reranks = _expand(spec.rerank, RerankConfig, "rerank")
        generations = _expand(spec.generation, GenerationConfig, "generation")
    except SpecError as e:
        raise SpecError(f"{path}: {e}") from None
    if any(g.samples != 1 for g in generations):
        raise SpecError(f"{path}: field 'generation.samples': set evaluation.samples instead")
    generations = [  # a random generator answers each question evaluation.samples times
        g.model_copy(update={"samples": spec.evaluation.samples}) if g.random else g for g in generations
    ]
    configs = [
        RagConfig(
            chunking=c.model_copy(update={"model": c.model or e.model}) if c.needs_model else c,
            embedding=e,
            index=_unused_ann_left_out(follow_language(i, r, spec.data.language), r),
            retrieval=r,
            rerank=rr,
            generation=g,
        )
        for c, e, i, r, rr, g in itertools.product(
            chunkings, embeddings, indexes, retrievals, reranks, generations
        )
    ]
    firsts: dict[str, RagConfig] = {}  # an ann that a config does not search made two of one: kept once
    configs = [
        firsts.setdefault(c.model_dump_json(), c) for c in configs if c.model_dump_json() not in firsts
    ]
    _check_consistency(spec, configs, path)
    configs = _search(configs, spec.search)
    base = path.parent
    labels, labels_fp = _judge_labels(spec, path)
    return Sweep(
        name=spec.name,
        path=path,
        corpus_path=(base / spec.data.corpus).resolve(),
        qa_path=(base / spec.data.qa).resolve(),
        max_queries=spec.data.max_queries,
        language=None if spec.data.language == "auto" else spec.data.language,
        detect_language=spec.data.language == "auto",
        weights=spec.weights,
        configs=tuple(configs),
        judge_model=spec.evaluation.judge_model,
        evaluation=spec.evaluation,
        judge_labels=labels,
        judge_labels_fp=labels_fp,
        judge_prompt=_judge_prompt(spec, path),
        decision=spec.decision,
        search=spec.search,
        qa_generation=spec.qa_generation,
        optimize=spec.optimize,
        gate=spec.gate,
    )


def _unused_ann_left_out(index: IndexConfig, retrieval: RetrievalConfig) -> IndexConfig:
    """A config whose retrieval reads no vector (`bm25`) searches no approximate index: its `index.ann` is
    exact, so it is neither built for it nor in its key (a grid of modes x ann types gives it once)."""
    from rag_core.components.retrieval_modes import retrieval_mode

    if not index.ann.approximate or retrieval_mode(retrieval.mode).reads_vector:
        return index
    return index.model_copy(update={"ann": AnnIndex()})


def follow_language(index: IndexConfig, retrieval: RetrievalConfig, language: str | None) -> IndexConfig:
    """The index of a config: one that searches keywords and names no analyzer gets the analyzer of the QA
    set's language where it has one (zh chinese, ja japanese, th thai); every other keeps its own (plain
    unless named), so a config that searches by vector alone keeps its index and fingerprints."""
    from rag_core.retrieval.keywords import analyzer_for

    analyzer = analyzer_for(language)
    if analyzer is None or "bm25_analyzer" in index.model_fields_set or not retrieval.reads_keywords:
        return index
    return index.model_copy(update={"bm25_analyzer": analyzer})


def _check_analyzer_language(index: IndexConfig, language: str | None) -> None:
    """An analyzer named for a language is the QA set's language when data.language names one: japanese over
    a Thai QA set, or english (stemming, no segmentation) over a Chinese, Japanese or Thai one, is an error.
    plain goes with every language; with no language (or `auto`) any analyzer may be named."""
    from rag_core.retrieval.keywords import SEGMENTING, analyzer_for

    analyzer = index.bm25_analyzer
    if language in (None, "auto") or analyzer == "plain":
        return
    own = analyzer_for(language)
    if analyzer in SEGMENTING and SEGMENTING[analyzer] != language:
        problem = f"{analyzer!r} segments {SEGMENTING[analyzer]} text but data.language is {language}"
    elif analyzer == "english" and own is not None:
        problem = f"'english' stems English words and cannot segment {language} text (data.language)"
    else:
        return
    advice = (
        f"leave it unset (a config that searches keywords then gets {own!r}) or name plain"
        if own
        else f"name plain ({language} has no segmenting analyzer)"
    )
    raise SpecError(f"field 'index.bm25_analyzer': {problem}; {advice}")


def _judge_prompt(spec: SweepFile, path: Path) -> str | None:
    """evaluation.judge_prompt's content (relative to the sweep file), checked on load: a template with the
    fields {question}, {answer} and {context}."""
    from rag_core.metrics.judge import template_problem

    ev = spec.evaluation
    if ev.judge_prompt is None:
        return None
    where = f"{path}: field 'evaluation.judge_prompt'"
    if not ev.judge_model:
        raise SpecError(f"{where}: a prompt for a judge, but no judge runs; set evaluation.judge_model")
    file = (path.parent / ev.judge_prompt).resolve()
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise SpecError(f"{where}: {file}: cannot be read ({type(e).__name__})") from None
    if problem := template_problem(text):
        raise SpecError(f"{where}: {file}: {problem}")
    return text


def _judge_labels(spec: SweepFile, path: Path) -> tuple[Path | None, str | None]:
    """The judge's labels file, read and checked on load (an error names its row and field before any
    work), and the hash of its content (the leaderboard's fingerprint holds it: edited labels, a new verdict)."""
    import hashlib

    from rag_core.metrics.judge_agreement import LabelsError, read_labels

    ev = spec.evaluation
    if ev.judge_labels is None:
        return None, None
    if not ev.judge_model:
        raise SpecError(
            f"{path}: field 'evaluation.judge_labels': labels for a judge, but no judge runs; set "
            "evaluation.judge_model"
        )
    labels = (path.parent / ev.judge_labels).resolve()
    try:
        read_labels(labels)
    except LabelsError as e:
        raise SpecError(f"{path}: field 'evaluation.judge_labels': {e}") from None
    return labels, hashlib.sha256(labels.read_bytes()).hexdigest()


def _check_consistency(spec: SweepFile, configs: list[RagConfig], path: Path) -> None:
    """Settings that are valid alone but not together."""
    if spec.weights.get("faithfulness_judge", 0) > 0 and not spec.evaluation.judge_model:
        raise SpecError(
            f"{path}: field 'weights.faithfulness_judge': weighted, but no judge runs; set "
            "evaluation.judge_model (a litellm model) or drop the weight"
        )
    for c in configs:
        if c.rerank.method != "none" and c.rerank.candidates < c.retrieval.top_k:
            raise SpecError(
                f"{path}: field 'rerank.candidates': {c.rerank.candidates} candidates cannot fill top_k "
                f"{c.retrieval.top_k} (retrieval.top_k); use candidates >= top_k"
            )
    if spec.optimize is not None:
        if spec.search.adaptive:
            raise SpecError(
                f"{path}: field 'optimize': not with search.strategy {spec.search.strategy!r} yet (the configs "
                "an optimization adds would change the space the search replays); use grid or random"
            )
        _check_optimize(spec.optimize, configs, path)


def _check_optimize(opt: OptimizeSpec, configs: list[RagConfig], path: Path) -> None:
    """Every component to optimize is read by some config (named configs: by each, checked in the plan,
    where config keys are known); the budget holds one iteration on the fewest selection questions an
    optimization runs on (on the QA set's own number: `check_optimize_budget`, once it is read)."""
    need = opt.min_metric_calls(MIN_OPTIMIZE_QUESTIONS)
    if opt.budget.max_metric_calls < need:
        raise SpecError(
            f"{path}: field 'optimize.budget.max_metric_calls': {opt.budget.max_metric_calls} cannot hold "
            f"the seed's validation and one iteration (two minibatches and the validation again) even on "
            f"the fewest selection questions, {MIN_OPTIMIZE_QUESTIONS}: give at least {need} (more with more "
            "questions)"
        )
    for component in opt.components:
        if not any(component_used(c, component) for c in configs):
            raise SpecError(
                f"{path}: field 'optimize.components': no config of this sweep uses {component} "
                f"({PROMPT_COMPONENTS[component]}: {COMPONENT_USE[component]})"
            )


def _search(configs: list[RagConfig], search: SearchSpec) -> list[RagConfig]:
    n = search.budget.max_configs
    if search.adaptive or n is None or n >= len(configs):  # adaptive: the run picks what to evaluate
        return configs
    from rag_core.search.strategies import STRATEGIES

    return [configs[i] for i in STRATEGIES.get(search.strategy).choose(len(configs), n, search.seed)]


def check_optimize_budget(sweep: Sweep, selection_questions: int, source: str = "the QA set") -> None:
    """A prompt optimization's budget against the selection questions it will run on, known once the QA
    set is read: refused before any step runs, not after the sweep (`source`: where the questions come
    from, for the message)."""
    opt = sweep.optimize
    if opt is None:
        return
    n = selection_questions
    held = " (the holdout aside)" if sweep.decision.holdout > 0 else ""
    if n < MIN_OPTIMIZE_QUESTIONS:
        raise SpecError(
            f"{sweep.path}: field 'optimize': prompt optimization needs at least {MIN_OPTIMIZE_QUESTIONS} "
            f"selection questions (a train and a validation one); {source} gives {n}{held}"
        )
    need = opt.min_metric_calls(n)
    if opt.budget.max_metric_calls < need:
        train, val = opt.split_sizes(n)
        raise SpecError(
            f"{sweep.path}: field 'optimize.budget.max_metric_calls': {opt.budget.max_metric_calls} cannot "
            f"hold the seed's validation and one iteration on the {n} selection questions {source} gives"
            f"{held}: the seed scores the {val} validation questions, an iteration two minibatches of "
            f"{min(opt.minibatch, train)} and the validation again; give at least {need}"
        )
