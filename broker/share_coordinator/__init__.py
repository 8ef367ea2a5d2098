"""The share coordinator (KIP-932): the durable state of every share partition (which
records of a share group's topic partition are acknowledged, archived or to be delivered
again), kept in the __share_group_state internal topic as Kafka's ShareSnapshot and
ShareUpdate records, hosted on the coordinator runtime beside the group and transaction
coordinators. Its clients are the share-partition leaders (broker.share), through the
InitializeShareGroupState, ReadShareGroupState, WriteShareGroupState,
DeleteShareGroupState and ReadShareGroupStateSummary requests.
"""
