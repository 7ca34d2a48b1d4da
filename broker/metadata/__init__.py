"""The broker's persisted metadata: topics, subscription groups, consumer offsets, delay offsets.

Each manager keeps its table in memory (owned by the event loop), writes it to ``<root>/config/*.json`` with
``common.persist.write_json_atomic`` off the loop, and offers ``snapshot()`` / ``replace_all`` or merge methods
for the slave's metadata sync (spec §4).
"""
