# editmeter: `make help` lists the targets.
PYTHON      ?= python3
VENV        ?= .venv
PY          := $(VENV)/bin/python
# Exact torch build for this project's machines; override elsewhere, e.g.
#   make install TORCH_SPEC="torch torchvision --index-url https://download.pytorch.org/whl/cu124"
TORCH_SPEC  ?= torch==2.14.1 torchvision==0.29.1
MODEL       ?= identity
QUERYSET    ?= demo
PROFILE     ?= pretrained
DEMO_EDITORS ?= identity,oracle,overedit
DIFFUSION_EDITORS ?= ip2p,magicbrush,sdedit,diffedit,p2p,imagic
DIFFUSION_LIMIT ?= 16
ARGS        ?=

export HF_HUB_OFFLINE ?= 1

.PHONY: help install demo demo-diffusion bench test test-all lint clean-results

help: ## list targets
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | expand -t 16

install: ## create .venv and install editmeter with test tools
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet $(TORCH_SPEC)
	$(PY) -m pip install --quiet -e ".[test,lint]"
	@$(PY) -c "import benchmark, torch; print('editmeter', benchmark.__version__, '| torch', torch.__version__)"

demo: ## run the whole pipeline offline on the bundled demo set with the weight-free editors
	$(PY) -m benchmark.run --multirun editor=$(DEMO_EDITORS) queryset=demo profile=tiny $(ARGS)
	$(PY) -m benchmark.leaderboard show --queryset demo

demo-diffusion: ## the diffusion editors, tiny random weights, first DIFFUSION_LIMIT demo queries (about a minute)
	OMP_NUM_THREADS=1 $(PY) -m benchmark.run --multirun editor=$(DIFFUSION_EDITORS) queryset=demo profile=tiny limit=$(DIFFUSION_LIMIT) $(ARGS)
	$(PY) -m benchmark.leaderboard show --queryset demo

bench: ## run one editor on one query set: make bench MODEL=ip2p QUERYSET=hatie [PROFILE=tiny] [ARGS="seed=1"]
	$(PY) -m benchmark.run editor=$(MODEL) queryset=$(QUERYSET) profile=$(PROFILE) $(ARGS)

test: ## offline test suite (HF_HUB_OFFLINE=1)
	$(PY) -m pytest -q $(ARGS)

lint: ## ruff
	$(PY) -m ruff check benchmark editors tests scripts

clean-results: ## delete everything under results/ (edits, scores, leaderboards)
	find results -mindepth 1 ! -name .gitkeep -delete
