"""Memory and knowledge: chunking, the hybrid (keyword + vector) index, MEMORY.md and knowledge/."""
