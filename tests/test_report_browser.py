"""The HTML report in a real browser: Debian's headless Chromium driven by selenium, page opened from file://.
It loads without console errors, its tables and grid render with every image loaded, the type filter changes the
grid, paging works, and a screenshot is taken. Skipped only where chromium or chromedriver is not installed (CI
installs both: .ci/run)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from report_results import report_results

CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
pytestmark = pytest.mark.skipif(not (CHROMIUM.is_file() and CHROMEDRIVER.is_file()),
                                reason="needs Debian's chromium and chromium-driver (/usr/bin/chromium, "
                                       "/usr/bin/chromedriver): apt-get install chromium chromium-driver")
PAGE_SIZE = 5


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    import sys

    from benchmark.commands.report import build_report

    results = Path(shutil.copytree(report_results(tmp_path_factory.getbasetemp()),
                                   tmp_path_factory.mktemp("browser-results") / "results"))
    _add_sweep_and_metaeval(results)
    out = tmp_path_factory.mktemp("browser") / "report"
    saved = sys.modules.get("benchmark.commands.compare", False)
    sys.modules["benchmark.commands.compare"] = None  # type: ignore[assignment]  # the guarded path: a note, no matrix
    try:
        build_report(results, out, page_size=PAGE_SIZE)
    finally:
        if saved is False:
            del sys.modules["benchmark.commands.compare"]
        else:
            sys.modules["benchmark.commands.compare"] = saved
    return out


def _add_sweep_and_metaeval(results: Path) -> None:
    """A two-setting sweep (one point partial) and one meta-evaluation table, so the page draws both sections."""
    from types import SimpleNamespace

    import pandas as pd

    from benchmark.commands.metaeval.table import write_table

    pd.DataFrame([{"queryset": "qs", "metric_set": "basic", "prompt_kind": "instruction", "profile": "tiny",
                   "editor": "overedit", "varying": "noise_std", "set.noise_std": x, "edit_type": "", "metric": "l1",
                   "value": 0.1 * x, "se": 0.01, "n": n, "complete": n == 14, "mark": "" if n == 14 else "PARTIAL 6/14",
                   "editor_sig": f"s{x}", "seed": 0} for x, n in ((6, 14), (12, 6))]
                 ).to_csv(results / "leaderboard_sweeps.csv", index=False)
    write_table(results / "metaeval", "gt-selection", [{"metric": "basic/l1", "higher_is_better": False,
                                                         "gt_first": 0.5, "gt_first_lo": 0.25, "gt_first_hi": 0.75}],
                queryset=SimpleNamespace(name="demo_mini", hash="ab" * 32), profile="tiny", resamples=10,
                confidence=0.95, seed=0, inputs={}, extra={})
    _add_arena(results)


def _add_arena(results: Path) -> None:
    """An arena of three editors (as `editmeter arena` writes it) and a damaged one, for the arena section."""

    editors = [{"editor": m, "rating": r, "ci_low": r - 20, "ci_high": r + 25, "battles": 28, "wins": w, "ties": t,
                "losses": 28 - w - t, "failed_calls": f, "anchored": False, "no_points": False}
               for m, r, w, t, f in (("oracle", 1080.0, 20, 4, 0), ("identity", 990.0, 12, 6, 1),
                                     ("overedit", 930.0, 5, 6, 1))]
    pairs = [{"a": "identity", "b": "oracle", "battles": 14, "wins_first": 0, "wins_second": 14, "ties": 0,
              "consistent": 14, "with_failed_call": 0},
             {"a": "identity", "b": "overedit", "battles": 14, "wins_first": 9, "wins_second": 2, "ties": 3,
              "consistent": 11, "with_failed_call": 1},
             {"a": "oracle", "b": "overedit", "battles": 14, "wins_first": 6, "wins_second": 3, "ties": 5,
              "consistent": 9, "with_failed_call": 0}]
    from PIL import Image

    (results / "arena" / "demo_mini" / "ex").mkdir(parents=True)
    ims = {}
    for name, colour in (("src", (10, 10, 10)), ("oracle", (200, 30, 30)), ("identity", (30, 30, 200))):
        ims[name] = results / "arena" / "demo_mini" / "ex" / f"{name}.png"
        Image.new("RGB", (16, 16), colour).save(ims[name])
    examples = {"identity|oracle": [{"query_id": "demo000-obj_add", "instruction": "add a cube", "source": str(ims["src"]),
                                     "a_edit": str(ims["identity"]), "b_edit": str(ims["oracle"]),
                                     "first_call": "model_b", "second_call": "model_b", "outcome": "model_b",
                                     "consistent": True, "failed_calls": 0}]}
    from benchmark.metrics.arena.tables import ratings_text

    (results / "arena" / "demo_mini" / "ratings.json").write_text(ratings_text(
        {"queryset": "demo_mini", "judge": "stand-in", "editors": editors, "pairs": pairs, "battles": 42,
         "examples": examples}))
    (results / "arena" / "broken").mkdir()
    (results / "arena" / "broken" / "ratings.json").write_text(ratings_text({"editors": [{"editor": "x"}], "pairs": []}))


@pytest.fixture(scope="module")
def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = str(CHROMIUM)
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1400,1800", "--allow-file-access-from-files"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(str(CHROMEDRIVER)))
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()


def _open(browser, report: Path):
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get((report / "index.html").resolve().as_uri())
    wait = WebDriverWait(browser, 10)
    wait.until(lambda d: d.find_element("tag name", "body").get_attribute("data-ready") == "1")
    wait.until(lambda d: d.find_elements("css selector", "#grid-table table.grid tbody tr"))
    return wait


def _grid_ids(browser) -> list[str]:
    return [td.text for td in browser.find_elements("css selector", "#grid-table table.grid tbody td.q > b")]


def _errors(browser) -> list[dict]:
    return [e for e in browser.get_log("browser") if e["level"] in ("SEVERE", "ERROR")]


def _all_images_loaded(browser) -> bool:
    return browser.execute_script(
        "const imgs = [...document.querySelectorAll('#grid-table img')];"
        "imgs.forEach(i => i.loading = 'eager');"
        "return imgs.length > 0 && imgs.every(i => i.complete && i.naturalWidth > 0);")


def test_page_loads_offline_without_console_errors_and_renders(browser, report, tmp_path):
    wait = _open(browser, report)
    assert _errors(browser) == []
    tables = browser.find_elements("css selector", "#leaderboards table.lb")
    assert tables and browser.find_elements("css selector", "#leaderboards tr.partial")
    assert "PARTIAL 10/14" in browser.find_element("id", "leaderboards").text
    assert browser.find_elements("css selector", "#chart svg rect.bar")  # a chart with bars ...
    assert browser.find_elements("css selector", "#chart svg line.err")  # ... and error bars
    assert "comparison not available" in browser.find_element("id", "comparison").text
    assert len(_grid_ids(browser)) == PAGE_SIZE
    wait.until(lambda d: _all_images_loaded(d))  # every thumbnail the grid links exists
    failures = browser.find_element("id", "failures").text
    assert "4 failed" in failures and "ValueError: bad query" in failures
    assert browser.find_element("id", "provenance").find_elements("css selector", "tbody tr")
    for section in ("sweeps", "metaeval"):  # the sections drawn in Python are linked from the nav
        assert browser.find_elements("css selector", f'nav a[href="#{section}"]')
    assert len(browser.find_elements("css selector", "#sweeps svg.sweep circle.pt")) == 2
    assert len(browser.find_elements("css selector", "#sweeps svg.sweep circle.pt.partial")) == 1
    assert "0.5 [0.25, 0.75]" in browser.find_element("id", "metaeval").text
    shot = tmp_path / "report.png"
    assert browser.save_screenshot(str(shot)) and shot.stat().st_size > 10_000
    assert _errors(browser) == []


def test_type_filter_and_paging_change_the_grid(browser, report):
    from selenium.webdriver.support.ui import Select

    wait = _open(browser, report)
    first_page = _grid_ids(browser)
    assert browser.find_element("id", "grid-page").text == "page 1 of 3 (14 queries)"
    browser.find_element("id", "grid-next").click()
    wait.until(lambda d: d.find_element("id", "grid-page").text.startswith("page 2 of 3"))
    wait.until(lambda d: _grid_ids(d) and _grid_ids(d)[0] not in first_page)
    second = _grid_ids(browser)
    assert len(second) == PAGE_SIZE and not set(second) & set(first_page)
    browser.find_element("id", "grid-next").click()
    wait.until(lambda d: d.find_element("id", "grid-page").text.startswith("page 3 of 3"))
    wait.until(lambda d: len(_grid_ids(d)) == 14 - 2 * PAGE_SIZE)
    assert browser.find_element("id", "grid-next").get_attribute("disabled")

    select = Select(browser.find_element("id", "grid-type"))
    label = next(o.text for o in select.options if o.text.startswith("obj_add"))
    select.select_by_visible_text(label)
    wait.until(lambda d: d.find_element("id", "grid-page").text == "page 1 of 1 (2 queries)")
    wait.until(lambda d: len(_grid_ids(d)) == 2)
    types = {tr.get_attribute("data-type") for tr in browser.find_elements("css selector", "#grid-table tbody tr")}
    assert types == {"obj_add"}
    classes = [o.text for o in Select(browser.find_element("id", "grid-class")).options]
    assert classes[0] == "all classes" and all("(" in c for c in classes[1:])  # only obj_add's classes
    wait.until(lambda d: _all_images_loaded(d))
    assert _errors(browser) == []


def test_report_folder_moved_keeps_page_and_thumbnails(browser, report, tmp_path):
    """Full-size images are links into results/; the page and its thumbnails live in the folder itself."""
    moved = Path(shutil.copytree(report, tmp_path / "moved"))
    wait = _open(browser, moved)
    wait.until(lambda d: _all_images_loaded(d))
    assert _errors(browser) == []


def _overflow(browser) -> dict:
    """How far the page is wider than the window (0: no horizontal scroll bar), and the widest offenders."""
    return browser.execute_script(
        "const w = document.documentElement.clientWidth;"
        "const wide = [...document.querySelectorAll('body *')].filter(e => {"
        "  const r = e.getBoundingClientRect(); return r.right > w + 1 && r.width > 0 && !e.closest('.scroll, .grid-wrap');"
        "}).slice(0, 5).map(e => e.tagName + (e.id ? '#' + e.id : '') + '.' + e.className + ' ' +"
        "  Math.round(e.getBoundingClientRect().right));"
        "return {over: Math.max(document.documentElement.scrollWidth, document.body.scrollWidth) - w, wide: wide};")


def test_nothing_overflows_a_1400_px_window(browser, report):
    """As a person sees it at 1400 px: no horizontal scroll of the page body (wide tables scroll in their own box),
    with every folded part opened, and no console error."""
    wait = _open(browser, report)
    assert browser.execute_script("return window.innerWidth") == 1400
    wait.until(lambda d: _all_images_loaded(d))
    browser.execute_script("document.querySelectorAll('details').forEach(d => d.open = true)")
    got = _overflow(browser)
    assert got["over"] <= 0, got
    assert _errors(browser) == []


def test_each_metric_set_is_one_headline_line_under_an_image_with_the_detail_on_demand(browser, report):
    """The grid became a wall of text with a few metric sets: each set is now one line (its first column with a
    value) whose other columns open on a click (and show on hover); closed by default."""
    _open(browser, report)
    boxes = browser.find_elements("css selector", "#grid-table details.scores")
    assert boxes and all(not b.get_attribute("open") for b in boxes)
    first = boxes[0]
    line = first.find_element("tag name", "summary")
    assert line.text.startswith("basic: ") and len(line.text.split()) == 3, line.text  # "basic: <column> <value>"
    hidden = first.find_element("css selector", ".score-detail")
    assert not hidden.is_displayed() and len(line.get_attribute("title").split(", ")) > 1
    line.click()
    assert hidden.is_displayed() and len(hidden.find_elements("tag name", "span")) > 1
    assert _errors(browser) == []


@pytest.fixture(scope="module")
def sampled_report(tmp_path_factory) -> Path:
    """The report of one run on a sample (`queryset=demo_mini queryset.sample=7`), a set no config is named after."""
    import sys

    from benchmark.commands.report import build_report
    from benchmark.commands.run import compose, run_pipeline

    results = tmp_path_factory.mktemp("sampled") / "results"
    cfg, choices = compose(["queryset=demo_mini", "queryset.sample=7", "profile=tiny", "editor=identity",
                            "metrics=basic", f"paths.results={results}", "progress=false",
                            "aggregate.bootstrap_resamples=20"])
    run_pipeline(cfg, choices["editor"])
    out = results.parent / "report"
    saved = sys.modules.get("benchmark.commands.compare", False)
    sys.modules["benchmark.commands.compare"] = None  # type: ignore[assignment]
    try:
        build_report(results, out, page_size=PAGE_SIZE)
    finally:
        if saved is False:
            del sys.modules["benchmark.commands.compare"]
        else:
            sys.modules["benchmark.commands.compare"] = saved
    return out


def test_the_report_of_a_sampled_set_shows_its_sources_and_ground_truth(browser, sampled_report):
    wait = _open(browser, sampled_report)
    heads = [th.text for th in browser.find_elements("css selector", "#grid-table table.grid thead th")]
    assert heads[:3] == ["query", "source", "ground truth"], heads
    assert "could not be loaded" not in browser.find_element("tag name", "body").text
    wait.until(lambda d: _all_images_loaded(d))
    for what in ("source", "ground truth"):
        imgs = browser.find_elements("css selector", f'#grid-table img[alt^="{what} "]')
        assert len(imgs) == PAGE_SIZE and all(i.get_attribute("naturalWidth") != "0" for i in imgs), what
    assert browser.find_element("id", "grid-page").text == "page 1 of 2 (7 queries)"
    assert _errors(browser) == []


def test_arena_ratings_and_win_rate_heatmap_render(browser, report):
    _open(browser, report)
    assert _errors(browser) == []
    assert browser.find_elements("css selector", 'nav a[href="#arena"]')
    section = browser.find_element("id", "arena")
    rows = section.find_elements("css selector", "table.arena-ratings tbody tr")
    assert [r.find_elements("tag name", "td")[0].text for r in rows] == ["oracle", "identity", "overedit"]
    assert len(section.find_elements("css selector", "table.arena-ratings svg.ci line")) == 3  # interval bars
    cells = section.find_elements("css selector", "table.arena-heatmap td.heat")
    assert len(cells) == 6  # 3 x 3 without the diagonal
    by_title = {c.get_attribute("title").split(":")[0]: c for c in cells}
    best, worst = by_title["oracle vs identity"], by_title["identity vs oracle"]
    assert (best.text, worst.text) == ("1.00", "0.00")
    assert best.value_of_css_property("background-color") != worst.value_of_css_property("background-color")
    assert "14 won, 0 tied, 0 lost of 14 battles" in best.get_attribute("title")
    assert "broken/ratings.json: not a ratings.json written by `editmeter arena`" in section.text


def test_clicking_a_heatmap_cell_shows_its_example_battles(browser, report):
    from selenium.webdriver.support.ui import WebDriverWait

    _open(browser, report)
    section = browser.find_element("id", "arena")
    panel = section.find_element("css selector", ".arena-battles")
    assert not panel.is_displayed()
    cell = next(c for c in section.find_elements("css selector", "table.arena-heatmap td.heat")
                if c.get_attribute("title").startswith("oracle vs identity"))
    cell.click()
    assert panel.is_displayed()
    assert "first call (identity as A): B's edit; swapped call: B's edit; battle: oracle" in panel.text
    WebDriverWait(browser, 10).until(lambda d: d.execute_script(
        "const imgs = [...document.querySelectorAll('.arena-battles img')];"
        "return imgs.length === 3 && imgs.every(i => i.complete && i.naturalWidth > 0);"))
    assert _errors(browser) == []
    cell.click()
    assert not panel.is_displayed()
    # a pair without examples has no click target
    other = next(c for c in section.find_elements("css selector", "table.arena-heatmap td.heat")
                 if c.get_attribute("title").startswith("overedit vs identity"))
    assert other.get_attribute("data-battles") is None
