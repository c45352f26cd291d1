"""The explainer app: `panel serve app` runs main.py. Modules here are imported as app.*."""
