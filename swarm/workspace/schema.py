"""Tables of the embedded workspace adapter (pull requests, reviews, merge events)."""
