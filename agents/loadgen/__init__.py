"""`moectl loadgen`: a drifting workload against the router's OpenAI API."""
