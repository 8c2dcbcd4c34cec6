"""Session transcripts stored as JSON files."""
