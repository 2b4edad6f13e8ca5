"""Difficulty cues: which kind of task a request names, as a handful of tokens for the classifier.

Why: character n-grams learn the exact words of the training rows. A very short request such as "debug
this", "sue my airline?", "孕妇能吃布洛芬吗" or "这段代码哪里错了" carries almost no n-grams, and its few
ones ("where", "哪里") lean towards venue questions. What makes it hard is its domain: code, medicine,
law, money, planning, writing, reasoning, a whole passage to translate. Each domain is a short list of
general words here (English and Chinese), and a request that names one gets one token
(``cue:medical``); the linear model learns each cue's weight from the training rows, and every cue also
fires in venue questions (a pharmacy, a tax-free counter, a writing desk), so it is evidence, not a rule.

``number`` counts the distinct numbers in the text (1, 2, 3, 4 or more): one-step arithmetic has two,
word problems have more.

The lists name domains, not training sentences: they were written from general vocabulary, and a test
checks that each cue fires on a plain example in both languages.
"""

from __future__ import annotations

import re

_CUES: dict[str, str] = {
    "code": (
        r"\b(python|java|javascript|typescript|c\+\+|golang|rust|sql|regex|regexp|regular expression|code|coding|"
        r"script|bug|debug|error|exception|stack ?trace|compile|compiler|api|json|csv|xml|yaml|html|css|"
        r"excel formula|vba|macro|linux|bash|shell|docker|kubernetes|git|null ?pointer|segfault|algorithm|"
        r"database|programming|crashloop\w*|deploy|backend|frontend)\b"
        r"|代码|(?<!小)程序|编程|函数|脚本|报错|正则|算法|数据库|编译|调试|bug|debug|sql|python|java"
    ),
    "medical": (
        r"\b(symptoms?|dose|dosage|mg|medications?|medicines?|pills?|drugs?|ibuprofen|paracetamol|acetaminophen|"
        r"aspirin|antibiotics?|amoxicillin|warfarin|insulin|metformin|statins?|xanax|pregnan\w*|allerg\w*|rash|"
        r"mole|cancer|tumou?r|diabet\w*|blood pressure|hypertension|chest pain|swallowed|overdose|side effects?|"
        r"diagnos\w*|infection|fracture|sprain\w*|migraine|seizure|asthma|vaccin\w*|prescription|"
        r"what could it be|should i see a doctor)\b"
        r"|症状|剂量|药(?![店房])|孕妇|怀孕|过敏|糖尿病|高血压|血压|胰岛素|抗生素|布洛芬|阿司匹林|对乙酰氨基酚|"
        r"疼|痛|炎(?!热)|癌|肿瘤|咳嗽|骨折|头晕|胸闷|副作用|挂什么科|是什么病|怎么治"
    ),
    "legal": (
        r"\b(sue|suing|lawsuit|lawyer|attorney|legal|illegal|law|laws|contract|lease|tenant|landlord|divorce|"
        r"custody|visas|visa (?:application|rules|status|extension|expir\w*|refus\w*)|immigration|asylum|enforceable|liable|liability|in court|court case|copyright|trademark|patent|"
        r"non-?compete|will and|inheritance|deport\w*|green card|work permit|opt)\b"
        r"|起诉|律师|法律|违法|合法|合同|离婚|抚养权|签证|移民|赔偿|仲裁|遗产|继承|侵权|版权|专利|劳动法"
    ),
    "finance": (
        r"\b(taxes|income tax|tax return|invest\w*|stocks?|mortgage|loan|interest rate|apr|ira|roth|401k|pension|"
        r"retire\w*|crypto\w*|bitcoin|etf|portfolio|dividend|refinanc\w*|credit score|annuity|amorti[sz]\w*|"
        r"monthly payment|compound interest)\b"
        r"|个税|(?<![免退])税|房贷|贷款|利息|利率|理财|投资|股票|基金|养老金|复利|月供|收益率|公积金"
    ),
    "plan": (
        r"\b(plan|planning|itinerary|budget|optimi[sz]e|day trip)\b"
        r"|规划|计划|行程|攻略|预算|安排一下|几天的"
    ),
    "write": (
        r"\b(write|draft|compose|essay|poem|poetry|speech|toast|letter|email|cover letter|resume|cv|"
        r"press release|slogan|summar\w*|rewrite|proofread|paraphrase|outline|article|blog|lyrics|"
        r"caption)\b"
        r"|写(?=[一个篇封首段份出下点些]|代码|程序|作文|文章|诗|邮件|信|简历|报告|总结)|帮我写|作文|文章|诗|演讲|邮件|总结|摘要|润色|改写|文案|稿|大纲|读后感|报告|对联|祝酒词"
    ),
    "reason": (
        r"\b(prove|proof|solve|puzzle|riddle|logic|logical|equation|derive|derivation|theorem|step by step|"
        r"in detail|pros and cons|compare|comparison|analy[sz]\w*|evaluate|critique|argue|debate|why did|"
        r"explain why|implications?|trade-?offs?|probability|optimal|knights and knaves)\b"
        r"|证明|推导|解方程|方程|逻辑|谜题|为什么|详细|分析|比较一下|对比|优劣|利弊|评价|原理|论证|概率|最优|推理|相容"
    ),
    "passage": (
        r"\b(this paragraph|this passage|whole (text|paragraph|page|document|letter)|the following|"
        r"this (text|document|article|letter|essay|contract|email)|paragraph|passage)\b"
        r"|下面这段|这段话|这段文字|这篇|全文|整段|以下内容|这封信|这份"
    ),
}
_CUE_RES = tuple((name, re.compile(pattern, re.IGNORECASE)) for name, pattern in _CUES.items())
_NUMBER_RE = re.compile(r"\d+(?:[.,]\d+)?|[零一二两三四五六七八九十百千万亿半]+(?=[个只块元岁天年月小时分钟公里米斤克度人次本张件辆层楼号%％])")


def cue_tokens(norm: str) -> list[str]:
    """The cue tokens of a normalised text (``normalize`` in ``features``): ``cue:<domain>`` and ``number:<n>``."""
    tokens = [f"cue:{name}" for name, pattern in _CUE_RES if pattern.search(norm)]
    numbers = len(set(_NUMBER_RE.findall(norm)))
    tokens.append(f"number:{min(numbers, 4)}")
    return tokens


CUE_NAMES = tuple(_CUES)

__all__ = ["CUE_NAMES", "cue_tokens"]
