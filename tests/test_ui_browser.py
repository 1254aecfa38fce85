"""The review page in a real browser: headless Debian Chromium, driven by Selenium through the system chromedriver,
against a real `memoryctl ui` and a real daemon. It logs in with the printed token, searches and opens a hit,
promotes a candidate and sees resolve change, forgets an entry and restores it; note text that looks like HTML stays
text. MEMORYD_UI_SCREENSHOTS=1 writes the tutorial's pictures (docs/tutorial/img/) as it goes.

Skipped when Chromium is not installed (the reason names the command that installs it); `.ci/run` installs it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Daemon
from tests.ui_harness import INSTALL, Server, browser, chromium, screenshot, seed, ui_server

FOUND = chromium()
pytestmark = pytest.mark.skipif(FOUND is None, reason=f"Chromium is not installed: {INSTALL}")


@pytest.fixture
def seeded(daemon: Daemon, workspace: tuple[Path, str]) -> dict[str, Any]:
    root, ws = workspace
    return {"root": root, "ws": ws, **seed(daemon, root, ws)}


@pytest.fixture
def server(daemon: Daemon, seeded: dict[str, Any]) -> Iterator[Server]:
    with ui_server(daemon, seeded["root"]) as running:
        yield running


@pytest.fixture
def driver() -> Iterator[Any]:
    assert FOUND is not None
    chrome = browser(FOUND[1], FOUND[0])
    chrome.set_page_load_timeout(30)
    try:
        yield chrome
    finally:
        chrome.quit()


def css(driver: Any, selector: str) -> Any:
    from selenium.webdriver.common.by import By

    return driver.find_element(By.CSS_SELECTOR, selector)


def css_all(driver: Any, selector: str) -> list[Any]:
    from selenium.webdriver.common.by import By

    found: list[Any] = driver.find_elements(By.CSS_SELECTOR, selector)
    return found


def click(driver: Any, selector: str) -> None:
    """Click and wait for the page it leads to (the element goes stale when the new page replaces it)."""
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    element = css(driver, selector)
    element.click()
    WebDriverWait(driver, 20).until(expected_conditions.staleness_of(element))


def submit(driver: Any, selector: str, text: str) -> None:
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    field = css(driver, selector)
    field.clear()
    field.send_keys(text + Keys.ENTER)
    WebDriverWait(driver, 20).until(expected_conditions.staleness_of(field))


def test_log_in_with_the_token_search_and_open_a_hit(driver: Any, server: Server, seeded: dict[str, Any]) -> None:
    ws = seeded["ws"]
    driver.get(server.url)
    assert driver.current_url == server.base + "/"  # the token was exchanged for the cookie and left the URL
    assert seeded["ws"] in css(driver, "#workspaces").text
    screenshot(driver, "overview")
    driver.get(f"{server.base}/w/{ws}/search")
    submit(driver, "#q", "串口超时")
    assert "bm25" in css(driver, "#search-meta").text
    entry = seeded["entries"][0]
    (note,) = [h for h in css_all(driver, "li.hit") if h.text.startswith(entry["path"])]
    assert [m.text for m in note.find_elements("css selector", ".snippet mark")] == ["串口超时"]
    assert note.find_element("css selector", ".via").text in ("words", "bm25", "both")
    assert any("spec/memory/profiles" in h.text for h in css_all(driver, "li.hit"))  # rules are found too
    screenshot(driver, "search")
    opened = note.find_element("css selector", "a.open")
    opened.click()
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, 20).until(expected_conditions.staleness_of(opened))
    assert css(driver, "h1.path").text == entry["path"]
    hit_lines = css_all(driver, ".ln.hit")
    assert hit_lines and "串口超时" in hit_lines[0].text
    assert "串口超时" in [m.text for m in css_all(driver, ".ln.hit mark")]
    assert entry["id"] in css(driver, "#doc").text
    screenshot(driver, "file")


def test_promote_a_candidate_and_resolve_changes(driver: Any, server: Server, seeded: dict[str, Any]) -> None:
    ws = seeded["ws"]
    driver.get(server.url)
    driver.get(f"{server.base}/w/{ws}/resolve?model=KX-200&fw=1.2.3")
    before = {row.get_attribute("data-key") for row in css_all(driver, "tr.fact")}
    assert before == {"transport.uart.baud", "transport.uart.flow_control"}
    baud = css(driver, 'tr.fact[data-key="transport.uart.baud"]')
    assert "uart-flow-control" in baud.find_element("css selector", ".winner").text
    assert "uart-default" in baud.find_element("css selector", ".beat").text
    screenshot(driver, "resolve")

    driver.get(f"{server.base}/w/{ws}/candidates")
    card = css(driver, 'article.candidate[data-rule="reset-hangs"]')
    assert "KX-200 fw 1.2.3 drops bytes" in card.text  # its evidence, expanded
    screenshot(driver, "candidates")
    click(driver, 'article.candidate[data-rule="reset-hangs"] a.promote')
    risk = css(driver, "#risk").text
    assert "spec/memory/profiles/KX-200/reset-hangs.yaml" in risk and "known_issues.reset_hangs: true" in risk
    screenshot(driver, "promote-preview")
    assert not (seeded["root"] / "spec/memory/profiles/KX-200/reset-hangs.yaml").exists()  # a preview writes nothing
    css(driver, "input[name=reason]").send_keys("seen on three benches（三台）")
    click(driver, "#confirm")
    assert "Done: promote" in driver.page_source, driver.page_source
    assert "seen on three benches（三台）" in css(driver, "#record").text  # recorded in history, reason and all

    driver.get(f"{server.base}/w/{ws}/resolve?model=KX-200&fw=1.2.3")
    row = css(driver, 'tr.fact[data-key="known_issues.reset_hangs"]')
    assert "reset-hangs" in row.find_element("css selector", ".winner").text
    assert row.find_element("css selector", ".value").text == "true"
    click(driver, 'tr.fact[data-key="known_issues.reset_hangs"] .winner a')
    chain = css(driver, "#provenance").text  # fact → rule → observations → run
    assert "known_issues.reset_hangs" in chain and seeded["observation"] in chain and "run-bench-1" in chain
    screenshot(driver, "provenance")


def test_forget_an_entry_and_restore_it(driver: Any, server: Server, seeded: dict[str, Any], daemon: Daemon) -> None:
    ws = seeded["ws"]
    entry = seeded["entries"][1]

    def found() -> bool:
        hits = daemon.call("search", {"workspace": ws, "query": "PSU browns out", "mode": "bm25"})["hits"]
        return any(h.get("item_id") == entry["id"] for h in hits)

    assert found()
    driver.get(server.url)
    driver.get(f"{server.base}/w/{ws}/file?path={entry['path']}")
    click(driver, f'.entry[data-item="{entry["id"]}"] a.forget')
    assert entry["id"] in css(driver, "#risk").text or entry["id"] in driver.page_source
    screenshot(driver, "forget-confirm")
    click(driver, "#confirm")
    assert "Done: forget" in css(driver, "#done").text
    assert not found()
    driver.get(f"{server.base}/w/{ws}/file?path={entry['path']}")
    mark = css(driver, f'.entry[data-item="{entry["id"]}"]')
    assert "forgotten" in mark.text
    forgotten_lines = css_all(driver, ".ln.forgotten")
    assert any("PSU" in line.text for line in forgotten_lines)
    screenshot(driver, "forgotten")
    click(driver, f'.entry[data-item="{entry["id"]}"] a')  # the forget that hid it
    click(driver, "#restore")
    preview = css(driver, "#risk").text
    assert "data/memory/forgotten.json" in preview and entry["id"] in preview
    screenshot(driver, "restore-preview")
    assert not found()  # the preview changed nothing
    click(driver, "#confirm")
    assert "Done: restore" in css(driver, "#done").text
    assert found()
    driver.get(f"{server.base}/w/{ws}/history")
    ops = [row.text for row in css_all(driver, "#timeline tr.event.change")]
    assert ops[0].startswith(tuple("0123456789")) and "restore" in ops[0] and "forget" in ops[1]
    screenshot(driver, "history")


def test_note_text_that_looks_like_html_stays_text(driver: Any, daemon: Daemon, workspace: tuple[Path, str]) -> None:
    root, ws = workspace
    hostile = "<script>document.title='pwned'</script><img src=x onerror=\"document.title='pwned'\"> 提示"
    written = daemon.call("remember", {"workspace": ws, "text": hostile})
    with ui_server(daemon, root) as server:
        driver.get(server.url)
        driver.get(f"{server.base}/w/{ws}/file?path={written['path']}")
        assert "pwned" not in driver.title
        assert "<script>document.title='pwned'</script>" in css(driver, "#doc").text
        assert not css_all(driver, "#doc script") and not css_all(driver, "#doc img")
        driver.get(f"{server.base}/w/{ws}/search?q=%E6%8F%90%E7%A4%BA")
        assert "<script>" in css(driver, "#hits").text and "pwned" not in driver.title


def test_a_browser_without_the_token_is_refused_and_the_token_works_once(driver: Any, server: Server) -> None:
    driver.get(server.base + "/")
    assert "403" in css(driver, "h1").text and "one-time token" in driver.page_source
    driver.get(server.url)
    assert driver.current_url == server.base + "/"
    driver.delete_all_cookies()
    driver.get(server.url)  # spent
    assert "403" in css(driver, "h1").text


def test_an_archive_dry_run_then_the_run(driver: Any, daemon: Daemon, workspace: tuple[Path, str]) -> None:
    root, ws = workspace
    old = root / "memory" / "2025-01-02.md"
    old.write_text("## 2025-01-02\n- 旧的 bench notes from long ago\n", encoding="utf-8")
    daemon.call("index", {"workspace": ws})
    with ui_server(daemon, root) as server:
        driver.get(server.url)
        driver.get(f"{server.base}/w/{ws}/lifecycle")
        click(driver, "#dry-run")  # archive, the setting's age
        planned = [row.text for row in css_all(driver, "#planned tr.planned")]
        assert any("memory/2025-01-02.md" in row and "delete" in row for row in planned)
        assert any("memory/archive/2025-01-02.md" in row and "create" in row for row in planned)
        assert old.exists()  # a dry run moves nothing
        screenshot(driver, "archive-dry-run")
        click(driver, "#confirm")
        assert "Done: archive" in css(driver, "#done").text
        assert not old.exists() and (root / "memory/archive/2025-01-02.md").exists()
        assert "memory/archive/2025-01-02.md" in css(driver, "body").text  # the change's diff names it
