"""The papers of healtrl's methods, as their model cards cite them: `title`, arXiv `id`, BibTeX `citation`, optional
`url`. Titles and authors from the first lines of each paper's text; OPEFO's text is the anonymous ACL submission,
its authors are those of its arXiv listing. arXiv ids (ARCHITECTURE.md, "Papers"; checked against the arXiv
listings' titles): HEAL 2604.17928, AER 2510.10959, PosAdv 2511.05993, OPEFO 2605.11491; the baselines as cited in
AER's / HEAL's references (Cui et al. 2025b, arXiv:2505.22617; Cheng et al. 2025, arXiv:2506.14758).
`tests/test_model_card.py` checks them against CITATION.cff."""

from __future__ import annotations

from typing import Any

HEAL_PAPER: dict[str, Any] = {
    "title": "HEALing Entropy Collapse: Enhancing Exploration in Few-Shot RLVR via Hybrid-Domain Entropy Dynamics Alignment",
    "id": "2604.17928",
    "citation": (
        "@misc{liu_heal,\n"
        "    title        = {{HEALing Entropy Collapse: Enhancing Exploration in Few-Shot RLVR via Hybrid-Domain Entropy Dynamics Alignment}},\n"
        "    author       = {Zhanyu Liu and Qingguo Hu and Ante Wang and Chenqing Liu and Zhishang Xiang and Hui Li and Delai Qiu and Jinsong Su},\n"
        "    howpublished = {\\url{https://github.com/XMUDeepLIT/HEAL}},\n"
        "    note         = {arXiv:2604.17928},\n"
        "}"
    ),
    "url": "https://github.com/XMUDeepLIT/HEAL",
}

AER_PAPER: dict[str, Any] = {
    "title": "Revisiting Entropy Regularization: Adaptive Coefficient Unlocks Its Potential for LLM Reinforcement Learning",
    "id": "2510.10959",
    "citation": (
        "@misc{zhang_aer,\n"
        "    title  = {{Revisiting Entropy Regularization: Adaptive Coefficient Unlocks Its Potential for LLM Reinforcement Learning}},\n"
        "    author = {Xiaoyun Zhang and Xiaojian Yuan and Di Huang and Wang You and Chen Hu and Jingqing Ruan and Kejiang Chen and Xing Hu},\n"
        "    note   = {arXiv:2510.10959},\n"
        "}"
    ),
}

POSADV_PAPER: dict[str, Any] = {
    "title": "Revisiting Entropy in Reinforcement Learning for Large Reasoning Models",
    "id": "2511.05993",
    "citation": (
        "@misc{jin_posadv,\n"
        "    title  = {{Revisiting Entropy in Reinforcement Learning for Large Reasoning Models}},\n"
        "    author = {Renren Jin and Pengzhi Gao and Yuqi Ren and Zhuowen Han and Tongxuan Zhang and Wuwei Huang and Wei Liu and Jian Luan and Deyi Xiong},\n"
        "    note   = {arXiv:2511.05993},\n"
        "}"
    ),
}

OPEFO_PAPER: dict[str, Any] = {
    "title": "Understanding and Preventing Entropy Collapse in RLVR with On-Policy Entropy Flow Optimization",
    "id": "2605.11491",
    "citation": (
        "@misc{xu_opefo,\n"
        "    title  = {{Understanding and Preventing Entropy Collapse in RLVR with On-Policy Entropy Flow Optimization}},\n"
        "    author = {Huimin Xu and Shuai Zhao and Xiaobao Wu and Anh Tuan Luu},\n"
        "    note   = {arXiv:2605.11491},\n"
        "}"
    ),
}

COV_PAPER: dict[str, Any] = {
    "title": "The Entropy Mechanism of Reinforcement Learning for Reasoning Language Models",
    "id": "2505.22617",
    "citation": (
        "@article{cui2025entropy,\n"
        "    title   = {{The Entropy Mechanism of Reinforcement Learning for Reasoning Language Models}},\n"
        "    author  = {Ganqu Cui and Yuchen Zhang and Jiacheng Chen and Lifan Yuan and Zhi Wang and Yuxin Zuo and Haozhan Li and Yuchen Fan and Huayu Chen and Weize Chen and others},\n"
        "    journal = {arXiv preprint arXiv:2505.22617},\n"
        "    year    = {2025},\n"
        "}"
    ),
}

ENTROPY_ADV_PAPER: dict[str, Any] = {
    "title": "Reasoning with Exploration: An Entropy Perspective",
    "id": "2506.14758",
    "citation": (
        "@article{cheng2025reasoning,\n"
        "    title   = {{Reasoning with Exploration: An Entropy Perspective}},\n"
        "    author  = {Daixuan Cheng and Shaohan Huang and Xuekai Zhu and Bo Dai and Wayne Xin Zhao and Zhenliang Zhang and Furu Wei},\n"
        "    journal = {arXiv preprint arXiv:2506.14758},\n"
        "    year    = {2025},\n"
        "}"
    ),
}
