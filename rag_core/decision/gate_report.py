"""The gate's verdicts as CI systems show them: a JUnit XML report (one test case per candidate and test:
a failure, a skip for inconclusive, the figures in the message) and a Markdown summary (pure)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

from rag_core.decision.gate import GateResult, Test


def _figures(t: Test) -> str:
    if t.difference is None:
        return "n/a"
    interval = f" [{t.ci_low:+.4f}, {t.ci_high:+.4f}]" if t.ci_low is not None else ""
    if t.holm_ci_low is not None:  # the interval the Holm-adjusted verdict used
        interval += f", Holm-adjusted [{t.holm_ci_low:+.4f}, {t.holm_ci_high:+.4f}]"
    return f"{t.difference:+.4f}{interval}"


def junit_xml(result: GateResult) -> str:
    """One <testsuite> "rag-sweep gate"; a <testcase> per candidate (classname: its label) and test (name:
    the metric); fail: <failure>, inconclusive: <skipped>, each with the figures in its message."""
    tests = [(c, t) for c in result.candidates for t in c.tests]
    suite = ET.Element(
        "testsuite",
        name="rag-sweep gate",
        tests=str(len(tests)),
        failures=str(sum(t.verdict == "fail" for _, t in tests)),
        skipped=str(sum(t.verdict == "inconclusive" for _, t in tests)),
        errors="0",
    )
    props = ET.SubElement(suite, "properties")
    for name, value in (
        ("baseline", result.baseline),
        ("verdict", result.verdict),
        ("questions", str(result.questions)),
        ("margin", f"{result.settings.margin:g}"),
        ("alpha", f"{result.settings.alpha:g}"),
        ("test", "equivalence (TOST)" if result.settings.equivalence else "non-inferiority"),
    ):
        ET.SubElement(props, "property", name=name, value=value)
    for c, t in tests:
        case = ET.SubElement(suite, "testcase", classname=c.label, name=t.metric)
        message = f"{t.verdict}: {c.label} vs {result.baseline}, {t.metric}: {t.why}"
        if t.verdict == "fail":
            ET.SubElement(case, "failure", message=message, type="worse").text = message
        elif t.verdict == "inconclusive":
            ET.SubElement(case, "skipped", message=message)
        else:
            ET.SubElement(case, "system-out").text = message
    root = ET.Element("testsuites", name="rag-sweep gate", tests=suite.get("tests"))
    root.set("failures", suite.get("failures"))
    root.append(suite)
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def markdown(result: GateResult) -> str:
    """A summary for a pull request: the verdict, then a row per candidate and test."""
    s = result.settings
    kind = (
        f"equivalent within ±{s.margin:g}"
        if s.equivalence
        else f"not worse than the baseline by {s.margin:g} or more"
    )
    lines = [
        f"## rag-sweep gate: **{result.verdict}**",
        "",
        f"Baseline **{result.baseline}** (overall score {_score(result.baseline_score)}) on {result.questions} "
        f"questions; a candidate passes when it is shown {kind} (paired one-sided t-tests, "
        f"{s.level:.0%} intervals and the Holm-adjusted ones the verdicts used, Holm over the candidates at "
        f"alpha {s.alpha:g}).",
        "",
        "| candidate | test | margin | difference [interval] | p (Holm) | verdict | why |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in result.candidates:
        for t in c.tests:
            p = t.p_fail_holm if t.verdict == "fail" else t.p_pass_holm
            lines.append(
                f"| {c.label} | {t.metric} | {t.margin:g} | {_figures(t)} | "
                f"{p:.3g} | **{t.verdict}** | {t.why.replace('|', '/')} |"
            )
    return "\n".join(lines) + "\n"


def _score(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.4f}"


def markdown_with_notes(result: GateResult, notes: list[str]) -> str:
    return markdown(result) + "".join(f"\n- {n}" for n in notes) + ("\n" if notes else "")


def reports(result: GateResult, notes: list[str]) -> dict[str, str]:
    """The gate's reports by file name: gate.json (every figure), gate.md (for a pull request), junit.xml."""
    return {
        "gate.json": json.dumps({**result.to_dict(), "notes": notes}, indent=2, default=str),
        "gate.md": markdown_with_notes(result, notes),
        "junit.xml": junit_xml(result),
    }
