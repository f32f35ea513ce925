"""ctest reads a run whose every test skipped (the GPU tests without a GPU) as skipped, not
passed: exit code 77 is the tests' SKIP_RETURN_CODE (python/CMakeLists.txt)."""


def pytest_sessionfinish(session, exitstatus):
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None or exitstatus != 0:
        return
    if reporter.stats.get("skipped") and not reporter.stats.get("passed"):
        session.exitstatus = 77
