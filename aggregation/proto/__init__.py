"""Generated from protos/ by protos/generate.py (do not edit; a test checks they match)."""
