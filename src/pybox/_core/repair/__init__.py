"""The repair loop's values (pure): goal, bounds, model choice, prompt, proposal, report.

A model may only propose code. Everything it sends is text that pybox parses
into at most one program; the loop (`pybox._features.repair.loop`) runs each
program in a fresh box, like any other code. One module per part; the names
are re-exported here (each imported on first use) so callers need not know which.
"""

from __future__ import annotations

from pybox._core.lazy import lazy_names

# Each name is imported from its part on first use (PEP 562): the operator's
# config needs the bounds on every run, the rest only the repair command does.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from pybox._core.repair.bounds import (
        REPAIR_CEILINGS,
        REPAIR_DEFAULTS,
        REPAIR_FIELDS,
        REPAIR_FIELDS_BY_KEY,
        REPAIR_SECTION,
        RepairBudget,
        RepairLimits,
        RepairPolicy,
    )
    from pybox._core.repair.goal import (
        IDENTIFIER_RE,
        TESTS_RUNNER_NAME,
        TESTS_SUMMARY_PREFIX,
        GoalCheck,
        GoalKind,
        RepairGoal,
        runner_for_tests,
        sha256_hex,
    )
    from pybox._core.repair.model import (
        ANTHROPIC_BASE_URL,
        DEFAULT_KEY_ENV,
        ENV_NAME_RE,
        OPENAI_BASE_URL,
        ProviderKind,
        RepairModel,
    )
    from pybox._core.repair.prompt import (
        SYSTEM_PROMPT,
        Prompt,
        RunEvidence,
        build_prompt,
        clip_middle,
    )
    from pybox._core.repair.proposal import (
        PYTHON_INFOS,
        InvalidProposal,
        Proposal,
        extract_proposal,
    )
    from pybox._core.repair.report import (
        REPAIR_VERSION,
        RepairReport,
        RepairRound,
        RepairRun,
        StopReason,
        summarize,
    )

# Public name -> the part that defines it.
_LAZY: dict[str, str] = {
    "REPAIR_CEILINGS": ".bounds",
    "REPAIR_DEFAULTS": ".bounds",
    "REPAIR_FIELDS": ".bounds",
    "REPAIR_FIELDS_BY_KEY": ".bounds",
    "REPAIR_SECTION": ".bounds",
    "RepairBudget": ".bounds",
    "RepairLimits": ".bounds",
    "RepairPolicy": ".bounds",
    "IDENTIFIER_RE": ".goal",
    "TESTS_RUNNER_NAME": ".goal",
    "TESTS_SUMMARY_PREFIX": ".goal",
    "GoalCheck": ".goal",
    "GoalKind": ".goal",
    "RepairGoal": ".goal",
    "runner_for_tests": ".goal",
    "sha256_hex": ".goal",
    "ANTHROPIC_BASE_URL": ".model",
    "DEFAULT_KEY_ENV": ".model",
    "ENV_NAME_RE": ".model",
    "OPENAI_BASE_URL": ".model",
    "ProviderKind": ".model",
    "RepairModel": ".model",
    "SYSTEM_PROMPT": ".prompt",
    "Prompt": ".prompt",
    "RunEvidence": ".prompt",
    "build_prompt": ".prompt",
    "clip_middle": ".prompt",
    "PYTHON_INFOS": ".proposal",
    "InvalidProposal": ".proposal",
    "Proposal": ".proposal",
    "extract_proposal": ".proposal",
    "REPAIR_VERSION": ".report",
    "RepairReport": ".report",
    "RepairRound": ".report",
    "RepairRun": ".report",
    "StopReason": ".report",
    "summarize": ".report",
}


__getattr__, __dir__ = lazy_names(globals(), _LAZY)


__all__ = [
    "ANTHROPIC_BASE_URL",
    "DEFAULT_KEY_ENV",
    "ENV_NAME_RE",
    "IDENTIFIER_RE",
    "OPENAI_BASE_URL",
    "PYTHON_INFOS",
    "REPAIR_CEILINGS",
    "REPAIR_DEFAULTS",
    "REPAIR_FIELDS",
    "REPAIR_FIELDS_BY_KEY",
    "REPAIR_SECTION",
    "REPAIR_VERSION",
    "SYSTEM_PROMPT",
    "TESTS_RUNNER_NAME",
    "TESTS_SUMMARY_PREFIX",
    "GoalCheck",
    "GoalKind",
    "InvalidProposal",
    "Prompt",
    "Proposal",
    "ProviderKind",
    "RepairBudget",
    "RepairGoal",
    "RepairLimits",
    "RepairModel",
    "RepairPolicy",
    "RepairReport",
    "RepairRound",
    "RepairRun",
    "RunEvidence",
    "StopReason",
    "build_prompt",
    "clip_middle",
    "extract_proposal",
    "runner_for_tests",
    "sha256_hex",
    "summarize",
]
