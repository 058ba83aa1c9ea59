"""The GPT-2 trainer's CPU side: model sizes (config), the flat parameter layout and init
(params), llm.c's file formats (formats) and the preparation of data and weights (prepro)."""
