"""The C++ suite runner's parsing (tests/conformance/cpp.py): gtest's test
list, the file that defines a suite, and the reason a failure gives."""

from __future__ import annotations

from pathlib import Path

from tests.conformance import cpp

LISTING = """\
BackoffTest.
  mandatoryStopTest
  ignoringMandatoryStopTest
Pulsar/DeadLetterQueueTest.
  testInitSubscription/isBatch_1_subType_1  # GetParam() = (true, 1)
Unix/ConnectionFailTest.
  test/0  # GetParam() = 0
"""


def test_test_list_is_parsed_to_full_names() -> None:
    assert cpp.parse_test_list(LISTING) == [
        "BackoffTest.mandatoryStopTest",
        "BackoffTest.ignoringMandatoryStopTest",
        "Pulsar/DeadLetterQueueTest.testInitSubscription/isBatch_1_subType_1",
        "Unix/ConnectionFailTest.test/0",
    ]


def test_suites_map_to_the_files_that_define_them(tmp_path: Path) -> None:
    tests = tmp_path / "tests"
    (tests / "unix").mkdir(parents=True)
    (tests / "BackoffTest.cc").write_text("TEST(BackoffTest, mandatoryStopTest) {}\n")
    (tests / "unix" / "ConnectionFailTest.cc").write_text("TEST_P(ConnectionFailTest, test) {}\n")
    files = cpp.suite_files(tmp_path)
    assert cpp.file_of("BackoffTest.mandatoryStopTest", files) == "BackoffTest.cc"
    assert cpp.file_of("Unix/ConnectionFailTest.test/0", files) == "unix/ConnectionFailTest.cc"
    assert cpp.file_of("Nowhere.test", files) == "?"


def test_failure_reason_names_the_line_and_both_values() -> None:
    log = """\
[ RUN      ] ConsumerTest.testGetLastMessageId
/src/tests/ConsumerTest.cc:921: Failure
Expected equality of these values:
  msgId
    Which is: (303,-1,-1,-1)
  MessageId(-1, -1, -1, -1)
    Which is: (-1,-1,-1,-1)
[  FAILED  ] ConsumerTest.testGetLastMessageId (3 ms)
"""
    reason = cpp._reason(log, 1)
    assert reason.startswith("ConsumerTest.cc:921: Expected equality")
    assert "(303,-1,-1,-1)" in reason and "(-1,-1,-1,-1)" in reason
    assert cpp._reason("", -11) == "killed by signal 11"
