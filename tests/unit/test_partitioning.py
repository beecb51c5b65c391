"""Partitioning, history keys and build slugs: the Kafka contract shared with other languages."""

from __future__ import annotations

import re
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamflow.kafka.naming import Names, build_slug, history_key, partition_for, split_history_key

# Kafka's Java client, the reference every other producer must agree with:
# - apache/kafka clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.java,
#   `testMurmur2` (e.g. commit f55581dc73953c3509a4702433aeeeddc2970779): Utils.murmur2 of these
#   keys is exactly these (signed 32-bit) values;
# - clients/.../producer/internals/BuiltInPartitioner.java, `partitionForKey`:
#   partition = Utils.toPositive(murmur2(key)) % numPartitions, toPositive(x) = x & 0x7fffffff.
JAVA_MURMUR2 = {
    "21": -973932308,
    "foobar": -790332482,
    "a-little-bit-long-string": -985981536,
    "a-little-bit-longer-string": -1486304829,
    "lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    "abc": 479470107,
}
INT32_MAX = 0x7FFFFFFF
RUN_ID = st.from_regex(r"[A-Za-z0-9_-]{1,64}", fullmatch=True)
BUILD_ID = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._:+/@-]{0,126}[A-Za-z0-9]", fullmatch=True)
TOPIC_NAME = re.compile(r"[A-Za-z0-9._-]{1,249}")


def java_partition(key: str, partitions: int) -> int:
    return (JAVA_MURMUR2[key] & INT32_MAX) % partitions


@pytest.mark.parametrize("key", sorted(JAVA_MURMUR2))
@pytest.mark.parametrize("partitions", [1, 2, 3, 6, 7, 12, 100, 1024])
def test_partition_for_matches_the_java_default_partitioner(key, partitions):
    assert partition_for(key, partitions) == java_partition(key, partitions)


@pytest.mark.parametrize("key", sorted(JAVA_MURMUR2))
def test_partition_for_reproduces_the_whole_java_hash(key):
    # Modulo 2**31 - 1 leaves the positive hash itself, so every bit is compared, not just a few.
    assert partition_for(key, INT32_MAX) == JAVA_MURMUR2[key] & INT32_MAX


def test_run_1_lands_where_java_puts_it_not_where_librdkafka_would():
    # kafka-notes §1.7: murmur2 puts "run-1" on partition 1 of 12, while librdkafka's default
    # partitioner (consistent_random: CRC32 of the key) puts it on 11. Producers must therefore
    # pass partition= explicitly (or partitioner=murmur2_random), never rely on the default.
    assert partition_for("run-1", 12) == 1
    assert zlib.crc32(b"run-1") % 12 == 11


@given(RUN_ID, st.integers(min_value=1, max_value=4096))
def test_partition_for_is_in_range_and_stable(run_id, partitions):
    partition = partition_for(run_id, partitions)
    assert 0 <= partition < partitions
    assert partition == partition_for(run_id, partitions)


@given(RUN_ID, st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1))
def test_history_keys_sort_bytewise_in_sequence_order(run_id, a, b):
    assert (history_key(run_id, a) < history_key(run_id, b)) == (a < b)


@pytest.mark.parametrize(("a", "b"), [(0, 1), (255, 256), (65535, 65536), (2**32 - 1, 2**32)])
def test_history_keys_order_across_byte_boundaries(a, b):
    # A decimal or little-endian encoding would sort 256 before 255; big-endian u64 cannot.
    assert history_key("run-1", a) < history_key("run-1", b)


@given(RUN_ID, RUN_ID, st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1))
def test_a_runs_history_is_contiguous_in_key_order(run_a, run_b, seq_a, seq_b):
    # The 0x00 separator sorts below every run-id character, so "run-1" keys never interleave
    # with "run-10" keys: a range scan over one run's prefix reads that run alone.
    if run_a != run_b:
        key_a, key_b = history_key(run_a, seq_a), history_key(run_b, seq_b)
        assert (key_a < key_b) == (run_a.encode() + b"\x00" < run_b.encode() + b"\x00")


@given(RUN_ID, st.integers(0, 2**64 - 1))
def test_history_keys_round_trip(run_id, sequence):
    assert split_history_key(history_key(run_id, sequence)) == (run_id, sequence)


@given(BUILD_ID)
def test_build_slugs_make_legal_topic_names(build):
    # The longest namespace KafkaSettings accepts (101) and the longest build id (128) still fit
    # Kafka's 249-character limit.
    topic = Names("n" * 101).tasks(build)
    assert TOPIC_NAME.fullmatch(build_slug(build))
    assert TOPIC_NAME.fullmatch(topic), topic


@pytest.mark.parametrize("build", ["v1", "orders-2026-08-23-sha51e73a2", "Build-7"])
def test_topic_safe_build_ids_keep_their_readable_name(build):
    assert build_slug(build) == build


@pytest.mark.parametrize("build", ["orders-2026.08.23", "a_b", "v1:rc/2"])
def test_other_build_ids_keep_a_readable_prefix_and_gain_a_hash(build):
    slug = build_slug(build)
    assert slug.startswith(build.replace(".", "_").replace(":", "_").replace("/", "_") + "-")
    assert len(slug) == len(build) + 9


def test_build_ids_differing_only_in_unsafe_characters_get_distinct_slugs():
    variants = [f"app{a}1{b}x" for a in ":+/@_" for b in ":+/@_"]
    slugs = {build_slug(v) for v in variants}
    assert len(slugs) == len(variants)
    assert len({Names("ns").tasks(v) for v in variants}) == len(variants)


@given(BUILD_ID, st.sampled_from(":+/@"), st.sampled_from(":+/@"))
def test_swapping_one_unsafe_character_for_another_changes_the_slug(build, old, new):
    swapped = build.replace(old, new)
    if swapped != build:
        assert build_slug(swapped) != build_slug(build)


def test_unpinned_runs_have_their_own_tasks_topic():
    assert Names("ns").tasks(None) == "ns.tasks._unpinned"
    assert build_slug(None) not in {build_slug("unpinned"), build_slug("_unpinned-x")}


def test_tasks_topics_of_distinct_builds_do_not_collide_in_kafka():
    def kafka_collision_key(topic: str) -> str:
        return topic.replace(".", "_")

    a, b = Names("ns").tasks("v1.2"), Names("ns").tasks("v1_2")
    assert kafka_collision_key(a) != kafka_collision_key(b)
