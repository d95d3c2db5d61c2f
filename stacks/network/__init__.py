"""A cluster's network as its account tells it (discovery) and as the hub plans with it. Pure.

- found.py: FoundNetwork, what discovery read (the wire form of a HubCluster's status.network);
- query.py: NetworkQuery, what discovery is asked for one cluster (its account, region, VPC or installer tag);
- merge.py: the declared network against the found one: which route tables and groups to take, what disagrees.
"""
