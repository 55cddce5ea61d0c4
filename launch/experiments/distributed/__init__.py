"""A run as a distributed program: its checks, graph, nodes, driver and autoscaler."""
