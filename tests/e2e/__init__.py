"""Browser tests of the web workbench (Playwright driving Debian's Chromium)."""
