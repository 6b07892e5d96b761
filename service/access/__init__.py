"""Who may ask for how much: API key labels and rate limits, per-key character quotas."""
