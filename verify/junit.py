"""A run's verdicts as JUnit XML, the format CI systems show test results from.

    <testsuites name="quantfloor" tests= failures= skipped= time=>
      <properties> the run's meta (device, versions, tier, command, ...) </properties>
      <testsuite name="quantfloor.SUITE" tests= failures= skipped= time=>
        <testcase classname="quantfloor.SUITE" name="CASE_ID" time="SECONDS">
          <failure message="FIRST REASON">every reason, then the repro line</failure>
          or <skipped message="WHY"/> for a case outside what the implementation supports
        </testcase>

One testcase per case id, suites in the order of the report. `pytest
--junitxml` names the same cases `test_case_passes_the_gate[CASE_ID]` in
classname `tests.test_suites`: the case id is the same string in both.
"""

import math
import re
import xml.etree.ElementTree as ET

from verify import report


def tree(verdicts, meta: dict) -> ET.ElementTree:
    """The JUnit XML document of a run (see the module docstring)."""
    if not isinstance(meta, dict):
        raise TypeError(f"meta: expected a dict, got {type(meta).__name__}")
    suites = report.by_suite(verdicts)
    root = ET.Element("testsuites", name="quantfloor")
    properties = ET.SubElement(root, "properties")
    for key, value in meta.items():
        if isinstance(value, (str, int, float)):
            ET.SubElement(properties, "property", name=str(key), value=_xml_text(str(value)))
    totals = {"tests": 0, "failures": 0, "skipped": 0, "time": 0.0}
    for suite, members in suites.items():
        element = ET.SubElement(root, "testsuite", name=f"quantfloor.{suite}")
        counts = {"tests": len(members), "failures": 0, "skipped": 0, "time": 0.0}
        for v in members:
            seconds = v.seconds if math.isfinite(v.seconds) else 0.0
            case = ET.SubElement(element, "testcase", classname=f"quantfloor.{suite}", name=v.case_id,
                                 time=f"{seconds:.3f}")
            counts["time"] += seconds
            if v.skipped:
                counts["skipped"] += 1
                ET.SubElement(case, "skipped", message=_first(v))
            elif not v.passed:
                counts["failures"] += 1
                failure = ET.SubElement(case, "failure", message=_first(v), type="quantfloor.gate")
                failure.text = _xml_text("\n".join([*v.reasons, f"err/floor {v.err_floor:.4g}, max abs "
                                                    f"{v.max_abs:.4g}, floor {v.floor:.4g}",
                                                    report.repro_line(v.case_id, meta)]))
        for key in totals:
            totals[key] += counts[key]
        _set_counts(element, counts)
    _set_counts(root, totals)
    ET.indent(root)
    return ET.ElementTree(root)


def write(path, verdicts, meta: dict) -> None:
    """Write the JUnit XML of a run to `path`."""
    tree(verdicts, meta).write(path, encoding="utf-8", xml_declaration=True)


def _first(v) -> str:
    return _xml_text(" ".join(v.reasons[0].split())) if v.reasons else "(no reason given)"


# Characters XML 1.0 cannot hold (control characters an exception's text may carry).
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _xml_text(text: str) -> str:
    return _NOT_XML.sub("?", text)


def _set_counts(element, counts: dict) -> None:
    element.set("tests", str(counts["tests"]))
    element.set("failures", str(counts["failures"]))
    element.set("errors", "0")
    element.set("skipped", str(counts["skipped"]))
    element.set("time", f"{counts['time']:.3f}")
