"""The web console (``/ui``) driven in a real headless Chromium (selenium + Debian's chromium-driver)
against real ``statekeep standalone`` processes: on ``local://``, ZooKeeper and etcd, with auth off and on.

Every test ends by reading the browser's console log: no JavaScript error and no failed request except
the ones the step expects (a 409 when an edit meets a newer version is an answer the console shows).
``STATEKEEP_SCREENSHOTS=DIR`` also saves a 1280x800 PNG of each page into DIR (see scripts/console-screenshots).
Run under ``flock /tmp/statekeep-heavy.lock`` (a browser is heavy on a shared machine)."""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import time
import uuid
from pathlib import Path

import httpx
import pytest
from conftest import missing, need

from support.server_process import create_function

need("fastapi")
webdriver = need("selenium.webdriver")

from selenium.common.exceptions import ElementNotInteractableException, StaleElementReferenceException  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.expected_conditions import staleness_of  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

TOKENS = {"root-token": {"superuser": True}, "acme-token": {"tenants": ["acme"]}}
WAIT_S = 20


@pytest.fixture(scope="module")
def browser():
    chromium, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    if not (chromium and driver_path):
        missing("chromium / chromium-driver are not installed")
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--window-size=1280,800", "--disable-gpu",
                "--disable-dev-shm-usage", "--hide-scrollbars"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    # a 1280x800 viewport (the window size includes the headless window's frame)
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                           {"width": 1280, "height": 800, "deviceScaleFactor": 1, "mobile": False})
    yield driver
    driver.quit()


@pytest.fixture(autouse=True)
def _fresh_page(request):
    """Each test starts with an empty browser log and leaves a blank page, so a server stopped at the
    end of one test cannot cut a live stream that the next test's log would report."""
    if "browser" not in request.fixturenames:
        yield
        return
    driver = request.getfixturevalue("browser")
    driver.get_log("browser")
    yield
    driver.get("about:blank")


@pytest.fixture(scope="module")
def local_server(server_process, tmp_path_factory):
    srv = server_process(tmp_path_factory.mktemp("console-local") / "data")
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def zk_console_server(server_process, tmp_path_factory, zk_server):
    srv = server_process(tmp_path_factory.mktemp("console-zk") / "data",
                        store=f"zk://{zk_server.address}/console{uuid.uuid4().hex[:8]}")
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def etcd_console_server(server_process, tmp_path_factory, etcd_server):
    srv = server_process(tmp_path_factory.mktemp("console-etcd") / "data",
                        store=f"etcd://{etcd_server.address}/console{uuid.uuid4().hex[:8]}")
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def k8s_console_server(server_process, tmp_path_factory, kubernetes_server):
    srv = server_process(tmp_path_factory.mktemp("console-k8s") / "data",
                        store=f"k8s://{kubernetes_server.namespace}/console{uuid.uuid4().hex[:8]}")
    yield srv
    srv.stop()


@pytest.fixture(params=["local", "zk", "etcd", "k8s"])
def server(request):
    return request.getfixturevalue(f"{request.param}_console_server" if request.param != "local" else "local_server")


# ---- helpers ---------------------------------------------------------------------------------------

def wait(driver, condition, what: str):
    """Wait (bounded) until ``condition(driver)`` is truthy. An element a live re-render replaced while the
    condition found or used it retries, found again: selenium says stale when the element was gone before
    the action, and "element not interactable" when it went during it (chromedriver then focuses or
    clicks a detached element)."""
    def check(d):
        try:
            return condition(d)
        except (StaleElementReferenceException, ElementNotInteractableException):
            return False
    return WebDriverWait(driver, WAIT_S, poll_frequency=0.1).until(check, message=what)


def click(driver, css: str) -> None:
    """Click ``css``, again if a live re-render replaced the element between finding and clicking."""
    wait(driver, lambda d: d.find_element(By.CSS_SELECTOR, css).click() or True, f"a click on {css}")


def click_link(driver, text: str) -> None:
    wait(driver, lambda d: d.find_element(By.LINK_TEXT, text).click() or True, f"a click on the link {text}")


def type_into(driver, css: str, text: str, *, clear: bool = False) -> None:
    """Type into ``css`` (emptied first if ``clear``), again into the new element if a live re-render
    replaced it first."""
    def typed(d) -> bool:
        field = d.find_element(By.CSS_SELECTOR, css)
        if clear:
            field.clear()
        field.send_keys(text)
        return True
    wait(driver, typed, f"typing into {css}")


def text_of(driver, css: str) -> str:
    found = driver.find_elements(By.CSS_SELECTOR, css)
    return found[0].text if found else ""


def row(driver, key: str):
    return driver.find_element(By.CSS_SELECTOR, f'#state tr[data-key="{key}"]')


def console_errors(driver, expected: tuple[str, ...] = ()) -> list[str]:
    """SEVERE browser log entries (JS errors, failed requests) not matching an ``expected`` pattern."""
    return [e["message"] for e in driver.get_log("browser")
            if e["level"] == "SEVERE" and not any(re.search(p, e["message"]) for p in expected)]


def screenshot(driver, name: str) -> None:
    directory = os.environ.get("STATEKEEP_SCREENSHOTS")
    if directory:
        Path(directory).mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(Path(directory) / f"{name}.png"))


def rest(server, token: str | None = None) -> httpx.Client:
    return httpx.Client(base_url=server.url, timeout=30,
                        headers={"Authorization": f"Bearer {token}"} if token else {})


def put(client: httpx.Client, fn: str, key: str, body: dict, version: int | None = None) -> dict:
    headers = {"If-Match": f'"{version}"'} if version is not None else {}
    r = client.post(f"/admin/v3/functions/{fn}/state/{key}", json=body, headers=headers)
    assert r.status_code == 200, r.text
    return r.json()


def sign_in(driver, token: str) -> None:
    field = wait(driver, lambda d: d.find_element(By.ID, "token") if d.find_element(By.ID, "login").is_displayed()
                 else None, "the token prompt")
    field.clear()
    field.send_keys(token)
    driver.find_element(By.CSS_SELECTOR, "#login-form button").click()


# ---- tests -----------------------------------------------------------------------------------------

def test_state_values_live_updates_and_conflict(browser, server):
    name = f"wc{uuid.uuid4().hex[:6]}"
    fn = f"public/default/{name}"
    with rest(server) as c:
        assert create_function(c, "public", "default", name).status_code == 200
        put(c, fn, "count", {"numberValue": 41})
        put(c, fn, "doc", {"stringValue": json.dumps({"a": 1, "b": [1, 2]})})
        put(c, fn, "note", {"stringValue": "hello console"})
        put(c, fn, "raw", {"byteValue": base64.b64encode(b"\x00\xff\x10").decode()})

        # from the start page to the function's state
        browser.get(server.url + "/ui")
        wait(browser, lambda d: d.find_element(By.LINK_TEXT, fn), "the function in the Functions list")
        assert wait(browser, lambda d: d.find_element(By.CSS_SELECTOR, f'tr[data-function="{fn}"] canvas.plot'),
                    "the records/s plot")
        click_link(browser, fn)
        wait(browser, lambda d: text_of(d, "#live") == "live", "the live stream")
        assert browser.current_url.endswith(f"/ui/functions/{fn}")
        assert row(browser, "count").find_element(By.CSS_SELECTOR, ".value pre").text == "41"
        assert row(browser, "count").find_element(By.CSS_SELECTOR, ".kind").text.lower() == "counter"
        doc = row(browser, "doc").find_element(By.CSS_SELECTOR, ".value pre").text
        assert json.loads(doc) == {"a": 1, "b": [1, 2]} and "\n" in doc  # pretty-printed
        assert row(browser, "note").find_element(By.CSS_SELECTOR, ".value pre").text == "hello console"
        assert row(browser, "raw").find_element(By.CSS_SELECTOR, ".value pre").text == "00 ff 10"
        screenshot(browser, "state")

        # a change made over REST appears without a reload (the page's own marker survives)
        browser.execute_script("window.__sameLoad = 1")
        put(c, fn, "note", {"stringValue": "changed over REST"})
        put(c, fn, "added", {"stringValue": "a new key"})
        wait(browser, lambda d: row(d, "note").find_element(By.CSS_SELECTOR, ".value pre").text
             == "changed over REST", "the REST change in the table")
        wait(browser, lambda d: row(d, "added").find_element(By.CSS_SELECTOR, ".version").text == "0",
             "the new key in the table")
        assert browser.execute_script("return window.__sameLoad") == 1
        assert row(browser, "note").find_element(By.CSS_SELECTOR, ".version").text == "1"

        # an edit based on version 1 meets version 2 written elsewhere: the conflict is shown, nothing lost
        row(browser, "note").find_element(By.CSS_SELECTOR, "button.edit").click()
        put(c, fn, "note", {"stringValue": "written elsewhere"})
        wait(browser, lambda d: "elsewhere" in text_of(d, "#edit-note"), "the editor's warning")
        editor = browser.find_element(By.ID, "edit-value")
        editor.clear()
        editor.send_keys("my edit")
        browser.find_element(By.ID, "edit-save").click()
        conflict = wait(browser, lambda d: d.find_element(By.ID, "conflict"), "the conflict")
        assert "written elsewhere" in conflict.text and "version 2" in conflict.text
        assert browser.find_element(By.ID, "edit-value").get_attribute("value") == "my edit"
        assert c.get(f"/admin/v3/functions/{fn}/state/note").json()["stringValue"] == "written elsewhere"
        screenshot(browser, "state-conflict")
        browser.find_element(By.ID, "overwrite").click()  # with the version the conflict showed
        wait(browser, lambda d: row(d, "note").find_element(By.CSS_SELECTOR, ".value pre").text == "my edit",
             "the saved edit")
        stored = c.get(f"/admin/v3/functions/{fn}/state/note").json()
        assert stored["stringValue"] == "my edit" and stored["version"] == 3

        # delete a key (If-Match its version) after confirming; the stream marks it deleted
        row(browser, "added").find_element(By.CSS_SELECTOR, "button.delete").click()
        wait(browser, lambda d: d.find_element(By.ID, "confirm").is_displayed(), "the confirmation")
        browser.find_element(By.ID, "confirm-ok").click()
        wait(browser, lambda d: "deleted" in row(d, "added").get_attribute("class"), "the deleted key")
        assert c.get(f"/admin/v3/functions/{fn}/state/added").status_code == 404

        # search by prefix: a bookmarkable URL with only the matching keys
        prefix = browser.find_element(By.ID, "prefix")
        prefix.send_keys("no")
        browser.find_element(By.CSS_SELECTOR, "#search button[type=submit]").click()
        wait(browser, lambda d: d.current_url.endswith("?prefix=no") and text_of(d, "#live") == "live", "the search")
        assert [r.get_attribute("data-key") for r in browser.find_elements(By.CSS_SELECTOR, "#state tbody tr")] \
            == ["note"]

        # the changelog page: position and the live tail
        browser.get(server.url + f"/ui/functions/{fn}/changelog")
        wait(browser, lambda d: text_of(d, "#live") == "live", "the changelog tail")
        assert "Last offset" in text_of(browser, "#position")
        put(c, fn, "tail", {"stringValue": "tailed"})
        wait(browser, lambda d: "tailed" in text_of(d, "#tail tbody tr:first-child"), "the new record in the tail")
        screenshot(browser, "changelog")
    assert console_errors(browser, expected=(r"state/note - .*409",)) == []


def test_changelog_page_shows_followers_and_lag(server_process, browser, tmp_path):
    first = server_process(tmp_path / "data")
    try:
        with rest(first) as c:
            assert create_function(c, "public", "default", "wc").status_code == 200
            put(c, "public/default/wc", "k", {"stringValue": "v"})
    finally:
        first.stop()
    from statekeep.changelog.snapshots import SnapshotStore
    from statekeep.functions.config.service import FunctionService

    with FunctionService.open(f"local://{tmp_path / 'data'}") as service:  # blobs: the store's DIR/blobs
        info = SnapshotStore(service.registry.store).create(service.registry.state_store("public", "default", "wc"))
    srv = server_process(tmp_path / "data", extra=["--follow", "public/default/wc"])  # a follower of its own store
    try:
        browser.get(srv.url + "/ui/functions/public/default/wc/changelog")
        wait(browser, lambda d: info.blob_url in text_of(d, "#snapshots"), "the snapshot")
        assert text_of(browser, "#snapshots tbody tr td:nth-child(2)") == str(info.offset)
        follower = '#followers tr[data-follower="public/default/wc"]'
        wait(browser, lambda d: text_of(d, f"{follower} .lag") == "0" and text_of(d, f"{follower} .applied") == "0",
             "the follower, caught up")
        wait(browser, lambda d: text_of(d, "#live") == "live", "the changelog tail")
        with rest(srv) as c:
            put(c, "public/default/wc", "k2", {"numberValue": 7})
        wait(browser, lambda d: "k2" in text_of(d, "#tail tbody tr:first-child"), "the new record in the tail")
        wait(browser, lambda d: text_of(d, f"{follower} .applied") == "1", "the follower applying it")
        assert text_of(browser, f"{follower} .lag") == "0"
        screenshot(browser, "changelog-followers")
        # the server ends each stream after a few seconds and the page reconnects: the label stays "live"
        ended = """return performance.getEntriesByType("resource")
            .filter(e => e.name.includes("/ui/api/events/functions/")).length"""
        before = browser.execute_script(ended)
        browser.execute_script("""const el = document.getElementById("live"); window.labels = [];
            new MutationObserver(() => window.labels.push(el.textContent))
                .observe(el, {childList: true, characterData: true, subtree: true});""")
        wait(browser, lambda d: d.execute_script(ended) > before, "a stream ended by the server")
        assert text_of(browser, "#live") == "live"
        assert "reconnecting…" not in browser.execute_script("return window.labels")
        # the snapshot is a state handle: the handles page starts at the snapshot store's root
        browser.get(srv.url + "/ui/handles")
        table = wait(browser, lambda d: d.find_element(By.ID, "handles"), "the handles table")
        assert info.key in table.text and "referenced" in text_of(browser, "#gc-summary")
        assert console_errors(browser) == []
    finally:
        browser.get("about:blank")
        srv.stop()


def test_metadata_tree_expands_and_follows(browser, server):
    name = f"tree{uuid.uuid4().hex[:6]}"
    with rest(server) as c:
        assert create_function(c, "public", "default", name).status_code == 200
        base = "/statekeep/functions/public/default"
        browser.get(server.url + f"/ui/metadata?path={base}/{name}")  # a bookmark: its ancestors open
        node = wait(browser, lambda d: d.find_element(By.CSS_SELECTOR, f'.node[data-path="{base}/{name}"]'),
                    "the bookmarked node")
        assert "selected" in node.get_attribute("class")
        wait(browser, lambda d: "Version" in text_of(d, "#stat"), "the Stat details")
        assert json.loads(browser.find_element(By.ID, "node-decoded").text)["name"] == name  # decoded JSON
        # lazily expand it: its children appear
        wait(browser, lambda d: d.find_element(By.CSS_SELECTOR, f'.node[data-path="{base}/{name}"]').find_element(
            By.XPATH, "preceding-sibling::span[@class='toggle']").click() or True, "a click on the toggle")
        wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, f'.node[data-path="{base}/{name}/code"]'),
             "the node's children")
        # created elsewhere (another function over REST): appears in the open tree
        other = f"later{uuid.uuid4().hex[:6]}"
        assert create_function(c, "public", "default", other).status_code == 200
        wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, f'.node[data-path="{base}/{other}"]'),
             "the node created elsewhere")
        screenshot(browser, "metadata")

        # create a child of the selected node (must not exist: version -1); the click shows its details
        # again, so the form to type into is the one that replaces the form shown now
        shown = browser.find_element(By.ID, "child-name")
        click(browser, f'.node[data-path="{base}/{name}"]')
        WebDriverWait(browser, WAIT_S, poll_frequency=0.1).until(staleness_of(shown), "the details the click showed")
        type_into(browser, "#child-name", "notes")  # from now on the details keep what is typed
        type_into(browser, "#child-value", "made in the console")
        click(browser, "#child-create")
        wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, f'.node[data-path="{base}/{name}/notes"]'),
             "the created child")
        assert c.get(f"/ui/api/node?path={base}/{name}/notes").json()["stringValue"] == "made in the console"

        # a node edited while another client writes it: the edit is kept, saving shows the conflict
        code_path = f"{base}/{name}/code"
        click(browser, f'.node[data-path="{code_path}"]')
        wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#details h2.mono")
             and d.find_element(By.CSS_SELECTOR, "#details h2.mono").text == code_path, "the code node")
        version = int(re.search(r"Version\n(\d+)", text_of(browser, "#stat")).group(1))
        type_into(browser, "#node-value", "# mine", clear=True)
        r = c.put(f"/ui/api/node?path={code_path}", json={"stringValue": "# elsewhere\n", "version": version})
        assert r.status_code == 200, r.text
        wait(browser, lambda d: "changed elsewhere" in text_of(d, "#node-note"), "the change notice")
        click(browser, "#node-save")
        conflict = wait(browser, lambda d: d.find_element(By.ID, "conflict"), "the conflict")
        assert f"since version {version}" in conflict.text
        assert browser.find_element(By.ID, "node-value").get_attribute("value") == "# mine"
        assert c.get(f"/ui/api/node?path={code_path}").json()["stringValue"] == "# elsewhere\n"
    assert console_errors(browser, expected=(r"/ui/api/node\?path=.*code - .*409",)) == []


def test_auth_prompt_and_tenant_scoping(server_process, browser, tmp_path):
    srv = server_process(tmp_path / "data", tokens=TOKENS)
    try:
        with rest(srv, "root-token") as root:
            assert create_function(root, "acme", "ns", "mine").status_code == 200
            assert create_function(root, "other", "ns", "theirs").status_code == 200
            put(root, "acme/ns/mine", "k", {"stringValue": "acme value"})
            for i in range(55):  # more than a page (50)
                put(root, "acme/ns/mine", f"p{i:02d}", {"numberValue": i})
        browser.get(srv.url + "/ui/functions")
        browser.delete_all_cookies()
        browser.execute_script("localStorage.clear()")
        browser.get(srv.url + "/ui/functions")
        sign_in(browser, "wrong-token")
        wait(browser, lambda d: "refused" in text_of(d, "#login-error"), "the refusal")
        screenshot(browser, "sign-in")
        sign_in(browser, "acme-token")
        wait(browser, lambda d: d.find_elements(By.LINK_TEXT, "acme/ns/mine"), "the tenant's function")
        assert not browser.find_elements(By.LINK_TEXT, "other/ns/theirs")
        click_link(browser, "acme/ns/mine")
        wait(browser, lambda d: text_of(d, "#live") == "live", "the live stream with the cookie")
        assert row(browser, "k").find_element(By.CSS_SELECTOR, ".value pre").text == "acme value"
        with rest(srv, "acme-token") as acme:
            put(acme, "acme/ns/mine", "k", {"stringValue": "pushed"})
        wait(browser, lambda d: row(d, "k").find_element(By.CSS_SELECTOR, ".value pre").text == "pushed",
             "the pushed change")
        keys = [r.get_attribute("data-key") for r in browser.find_elements(By.CSS_SELECTOR, "#state tbody tr")]
        assert keys == ["k"] + [f"p{i:02d}" for i in range(49)]
        browser.find_element(By.ID, "next-page").click()  # the next page, a bookmarkable URL
        wait(browser, lambda d: "startAfter=p48" in d.current_url
             and d.find_elements(By.CSS_SELECTOR, "#state tbody tr"), "the second page")
        assert [r.get_attribute("data-key") for r in browser.find_elements(By.CSS_SELECTOR, "#state tbody tr")] \
            == [f"p{i:02d}" for i in range(49, 55)]
        browser.get(srv.url + "/ui/metadata")  # the whole store: superusers only
        wait(browser, lambda d: "superuser" in text_of(d, "#message"), "the superuser notice")
        assert not browser.find_elements(By.CSS_SELECTOR, ".tree .node")
        # the console's own endpoints refuse the same way the REST API does
        assert httpx.get(srv.url + "/ui/api/tree?path=/", headers={"Authorization": "Bearer acme-token"}
                         ).status_code == 403
        assert httpx.get(srv.url + "/ui/api/functions").status_code == 401
        assert httpx.get(srv.url + "/ui/api/events/functions/other/ns/theirs/state",
                         cookies={"statekeep_token": "acme-token"}).status_code == 403
        browser.find_element(By.ID, "sign-out").click()
        sign_in(browser, "root-token")
        wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, '.tree .node[data-path="/statekeep"]'),
             "the tree for the superuser")
        browser.get(srv.url + "/ui/functions")
        wait(browser, lambda d: d.find_elements(By.LINK_TEXT, "other/ns/theirs"), "every tenant's function")
        assert console_errors(browser) == []
    finally:
        browser.execute_script("localStorage.clear()")
        browser.delete_all_cookies()
        browser.get("about:blank")  # close the page's streams before their server goes
        srv.stop()


def test_records_per_batch_plot_and_handles_page(browser, local_server, tmp_path):
    """The records/s plot reads the status the runtime rewrites after each micro-batch (written here in
    the runtime's format, as a worker would: a Spark worker would cost this suite its time budget); the
    handles page lists handles, sizes, checksums and the orphan blobs a gc dry run finds."""
    from statekeep.functions.driver.spark import STATUS_ROOT, status_json

    name = f"plot{uuid.uuid4().hex[:6]}"
    fn = f"public/default/{name}"
    with rest(local_server) as c:
        assert create_function(c, "public", "default", name).status_code == 200
        browser.get(local_server.url + "/ui/functions")  # the history starts with the console
        wait(browser, lambda d: d.find_elements(By.LINK_TEXT, fn), "the function")
        path = f"{STATUS_ROOT}/{fn}"

        def processed(k):  # the running total after micro-batch k
            return 50 * k * k

        def history():
            return c.get(f"/ui/api/functions/{fn}/batches").json()

        # one status write per micro-batch, as the runtime's; the history reads the status a notification
        # names when it gets to it, so writes it reads late are merged into one entry (and the first status
        # it reads is its baseline): write until two entries are there
        for k in range(1, 13):
            status = {"running": True, "error": None, "processed": processed(k), "skipped": 0, "outputs": 0,
                      "batches": k, "last_batch": k - 1, "workerId": "w", "updated_ms": 1000 * k}
            assert c.put(f"/ui/api/node?path={path}",
                         json={"stringValue": status_json(status).decode()}).status_code == 200
            deadline = time.monotonic() + 2
            while k > 1 and not history() and time.monotonic() < deadline:
                time.sleep(0.05)
            if len(history()) >= 2:
                break
        entries = history()
        assert len(entries) >= 2
        for e in entries:  # each entry covers the micro-batches since the status before it
            k, since = e["batch"] + 1, e["batch"] + 1 - e["batches"]
            assert e["records"] == processed(k) - processed(since) and e["seconds"] == e["batches"]
            assert e["rate"] == e["records"] / e["seconds"]
        wait(browser, lambda d: d.find_element(By.CSS_SELECTOR, f'canvas[data-function="{fn}"]')
             .get_attribute("data-points") == str(len(history())), "the plot drawn with every entry")
        screenshot(browser, "functions")

        # stop and start (Pulsar's lifecycle routes): the wanted state is kept in the registry
        button = f'tr[data-function="{fn}"] button.lifecycle'
        stopped = f"/ui/api/node?path=/statekeep/functions/{fn}/stopped"
        assert browser.find_element(By.CSS_SELECTOR, button).text == "Stop"
        click(browser, button)
        wait(browser, lambda d: d.find_element(By.CSS_SELECTOR, button).text == "Start", "the stopped function")
        assert "stopped" in browser.find_element(By.CSS_SELECTOR, f'tr[data-function="{fn}"] .badge').text
        assert c.get(stopped).json()["exists"] is True
        click(browser, button)
        wait(browser, lambda d: d.find_element(By.CSS_SELECTOR, button).text == "Stop", "the started function")
        assert c.get(stopped).json()["exists"] is False

        # create a function from the page, then delete it after confirming
        made = f"made{uuid.uuid4().hex[:6]}"
        browser.find_element(By.ID, "new-function").click()
        form = browser.find_element(By.ID, "create-form")
        form.find_element(By.NAME, "name").send_keys(made)
        form.find_element(By.NAME, "inputs").send_keys("words.jsonl")
        form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
        wait(browser, lambda d: d.find_elements(By.LINK_TEXT, f"public/default/{made}"), "the created function")
        assert c.get(f"/admin/v3/functions/public/default/{made}").json()["inputs"] == ["words.jsonl"]
        click(browser, f'tr[data-function="public/default/{made}"] button.danger')
        wait(browser, lambda d: d.find_element(By.ID, "confirm").is_displayed(), "the confirmation")
        browser.find_element(By.ID, "confirm-cancel").click()
        assert c.get(f"/admin/v3/functions/public/default/{made}").status_code == 200  # cancelled: kept
        click(browser, f'tr[data-function="public/default/{made}"] button.danger')
        wait(browser, lambda d: d.find_element(By.ID, "confirm").is_displayed(), "the confirmation")
        browser.find_element(By.ID, "confirm-ok").click()
        wait(browser, lambda d: not d.find_elements(By.LINK_TEXT, f"public/default/{made}"), "the deleted function")
        assert c.get(f"/admin/v3/functions/public/default/{made}").status_code == 404

    # state handles written by another process on the same store, and an orphan blob beside them
    import hashlib

    from statekeep.handles import BlobStore, StateHandleStore
    from statekeep.metadata import open_store

    root, blobs_url = f"/console/h{uuid.uuid4().hex[:6]}", f"file://{tmp_path / 'blobs'}"
    with open_store(f"local://{local_server.data_dir}") as store:
        handles = StateHandleStore(store, root, blobs_url, lock_identity="worker-1")
        state = b"x" * 1000
        handles.add_and_lock("state-a", state, attributes={"offset": 7})
        orphan = BlobStore(blobs_url).write(root, "lost", b"no handle points here")
        browser.get(local_server.url + f"/ui/handles?root={root}&blobs={blobs_url}&grace=0")
        table = wait(browser, lambda d: d.find_element(By.ID, "handles"), "the handles table")
        assert "state-a" in table.text and hashlib.sha256(state).hexdigest() in table.text
        assert "1000 B" in table.text and '"offset":7' in table.text
        assert "1 orphans" in text_of(browser, "#gc-summary")
        assert orphan.url in text_of(browser, "#orphans")
        screenshot(browser, "handles")
        handles.release_all()
    assert console_errors(browser) == []


TIMED = '''
def process(records, context):
    w = context.get_window()
    context.register_timer(w.end + 1_000)
    context.register_timer(context.get_current_processing_time() + 3_600_000, "processing")
    context.put_state("fired:" + w.key, str(len(records)))
    context.put_state("brief:" + w.key, "gone by now", ttl_seconds=60)
    return {"key": w.key, "end": w.end}

def on_timer(key, ts, context):
    return {"timer": key, "at": ts}
'''


def test_timers_panel_lists_a_functions_timers_and_hides_time_state(server_process, browser, tmp_path, monkeypatch):
    """A windowed function run over one micro-batch (as a Spark executor runs a partition) keeps timers in
    all three domains: an open window's end (window), the event-time timer a fired window registered
    (event), and processing-time timers. Its page lists each with key, time and domain under the
    watermark; the state table shows neither the internal NUL-prefixed time entries nor keys whose TTL
    has passed; a function without timers says so; an unknown function's timers are a 404 with a reason."""
    import time


    from statekeep.functions.windowing import timerun
    from statekeep.functions.config.spec import Layout
    from statekeep.functions.executor.runtime import run_partition
    from statekeep.functions.config.service import FunctionService
    from statekeep.functions.config.spec import executor_spec
    from statekeep.state.timestate import buffer_key, expiry_key, is_internal

    url = f"local://{tmp_path / 'data'}"
    now = int(time.time() * 1000) - 600_000  # the batch ran ten minutes ago: its 60 s TTLs have passed
    monkeypatch.setattr(timerun, "CLOCK", lambda: now)
    t0 = 1_700_000_040_000  # a minute boundary
    with FunctionService.open(url) as service:
        service.registry.create({"tenant": "public", "namespace": "default", "name": "timed", "inputs": ["in.jsonl"],
                                 "keyField": "k", "inputFormat": "json", "output": str(tmp_path / "out"),
                                 "windowConfig": {"windowLengthDurationMs": 60_000},
                                 "userConfig": {"eventTimeField": "ts"}}, TIMED.encode())
        service.registry.create({"tenant": "public", "namespace": "default", "name": "plain",
                                 "inputs": ["in.jsonl"]}, b"def process(input, context):\n    return input\n")
        spec = executor_spec(service.registry, url, "public", "default", "timed")[0]
    # the function's first micro-batch in one partition, as an executor runs it (no watermark before it:
    # the partition's own is its records' largest event time)
    records = [{"k": "a", "ts": t0 + 1}, {"k": "b", "ts": t0 + 2}, {"k": "a", "ts": t0 + 60_005},
               {"k": "c", "ts": t0 + 120_007}]
    store = spec.state_store()
    groups, parallelism = store.partitioning(1) or (128, 1)
    assert parallelism == 1
    stats = run_partition(spec, 0, 0, [json.dumps(r) for r in records], record_keys=[r["k"] for r in records],
                          layout=Layout(groups, 1))
    assert stats.processed == 4 and not stats.errors
    # windows [t0, t0+60s) of a and b and [t0+60s, t0+120s) of a fired (their event timers at end + 1 s:
    # a and b's first ones fired too, a's second is pending); c's window is open; watermark t0 + 120007
    expected = [("a", t0 + 121_000, "event"), ("c", t0 + 180_000, "window"),
                ("a", now + 3_600_000, "processing"), ("b", now + 3_600_000, "processing")]
    # what the page must hide is stored: the internal time entries and the expired keys
    assert store.get_entry("brief:a") is not None and store.get_entry(expiry_key("brief:a")) is not None
    assert store.get_entry(buffer_key("c")) is not None
    assert any(is_internal(e.key) for e in store.scan_entries("", None, 10))

    srv = server_process(tmp_path / "data")
    try:
        with rest(srv) as c:
            fn = "/admin/v3/functions/public/default"
            timers = c.get(f"{fn}/timed/timers").json()
            assert [(t["key"], t["timestamp"], t["domain"]) for t in timers["timers"]] == expected
            assert timers["watermark"] == t0 + 120_007
            assert [i["key"] for i in c.get(f"{fn}/timed/state").json()["items"]] == ["fired:a", "fired:b"]
            unknown = c.get(f"{fn}/nope/timers")
            assert unknown.status_code == 404 and unknown.headers["content-type"].startswith("application/json")
            assert "nope" in unknown.json()["reason"]

        browser.get(srv.url + "/ui/functions/public/default/timed")
        wait(browser, lambda d: text_of(d, "#live") == "live", "the live stream")
        wait(browser, lambda d: "watermark" in text_of(d, "#timers-title"), "the timers")
        shown = [tuple(td.text for td in tr.find_elements(By.TAG_NAME, "td"))
                 for tr in browser.find_elements(By.CSS_SELECTOR, "#timers tbody tr")]
        assert shown == [(key, str(ts), domain) for key, ts, domain in expected]
        assert text_of(browser, "#timers-title") == f"Timers (watermark: {t0 + 120_007})"
        keys = [r.get_attribute("data-key") for r in browser.find_elements(By.CSS_SELECTOR, "#state tbody tr")]
        assert keys == ["fired:a", "fired:b"]
        state_text = text_of(browser, "#state")
        assert "brief:" not in state_text and "\x00" not in state_text
        screenshot(browser, "timers")

        # a function without timers: the panel says so (no error, no stale rows)
        browser.get(srv.url + "/ui/functions/public/default/plain")
        wait(browser, lambda d: "watermark" in text_of(d, "#timers-title"), "the timers of a function without any")
        assert text_of(browser, "#timers-title") == "Timers (watermark: none)"
        assert [tr.text for tr in browser.find_elements(By.CSS_SELECTOR, "#timers tbody tr")] == ["No timers."]
        assert not browser.find_element(By.ID, "message").is_displayed()
        screenshot(browser, "timers-empty")
        assert console_errors(browser) == []
    finally:
        browser.get("about:blank")  # close the page's streams before their server goes
        srv.stop()


def test_state_and_changelog_pages_show_typed_variables_decoded(server_process, browser, tmp_path):
    """A function's value, list and map state (and entries whose TTL ran out) written as its records write
    them: its state page lists each key's variables decoded to JSON beside its one bytes key, and follows a
    new batch live; its changelog page's tail shows each change of a variable by key, variable and element."""
    from statekeep.functions.config.service import FunctionService
    from support.typed_state import ANN, FN, commit, write_state

    url = f"local://{tmp_path / 'data'}"
    with FunctionService.open(url) as service:
        service.registry.create({"tenant": FN[0], "namespace": FN[1], "name": FN[2], "inputs": ["x"]},
                                b"def process(input, context):\n    pass\n")
        write_state(service)
    srv = server_process(tmp_path / "data")
    shown = """return [...document.querySelectorAll("#variables tbody tr[data-variable]")].map(
        tr => [tr.dataset.key, tr.dataset.variable, JSON.parse(tr.querySelector("pre").textContent)])"""
    try:
        browser.get(srv.url + "/ui/functions/public/default/typed")
        wait(browser, lambda d: text_of(d, "#live") == "live", "the live stream")
        wait(browser, lambda d: d.execute_script(shown), "the variables")
        assert browser.execute_script(shown) == [["ann", name, ANN[name]] for name in ("best", "bids", "count")] + [
            ["bob", "count", 1]]  # "old" and "gone" expired
        assert [r.get_attribute("data-key") for r in browser.find_elements(By.CSS_SELECTOR, "#state tbody tr")] == [
            "plain"]
        screenshot(browser, "state-variables")
        with FunctionService.open(url) as service:  # a new batch while the page is open
            commit(service.registry.state_store(*FN), lambda c: c.map_state("seen", str, bool).of("bob").put("x", True))
        wait(browser, lambda d: ["bob", "seen", {"x": True}] in d.execute_script(shown), "the new variable, live")
        browser.get(srv.url + "/ui/functions/public/default/typed/changelog")
        # (.kind is shown upper case)
        wait(browser, lambda d: 'variable seen["x"]' in text_of(d, "#tail tbody tr:first-child").lower(),
             "the newest change: a map entry")
        tail = [tr.text.lower() for tr in browser.find_elements(By.CSS_SELECTOR, "#tail tbody tr")]
        assert any("ann" in t and "variable bids[1]" in t and '"price": 5' in t for t in tail), tail
        assert not any("\x00" in t or "variable old" in t for t in tail), tail
        assert console_errors(browser) == []
    finally:
        browser.get("about:blank")
        srv.stop()
