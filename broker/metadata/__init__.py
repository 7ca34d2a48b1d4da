"""The broker's persisted metadata: topics, subscription groups, consumer offsets, delay offsets.

Each manager keeps its table in memory (owned by the event loop) and writes it to ``<root>/config/*.json`` in
batches, built and serialised off the loop (``config_file``, ``common.persist.BatchedJsonWriter``); it offers
``snapshot()`` / ``replace_all`` or merge methods for the slave's metadata sync (spec §4). What clients may create
by naming it is bounded (``maxAutoCreatedTopics``, ``maxAutoCreatedSubscriptionGroups``; ``metrics``).
"""
