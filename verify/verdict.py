"""The judgement of one case: what was measured and whether it passed."""

from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class Verdict:
    """One case's result.

    suite      : the suite it ran in ("decode-onepass", "decode-split", "kda", ...)
    case_id    : the stable case id
    passed     : the gate's decision
    max_abs    : max |out - ref8| over all checked tensors (nan if not comparable)
    rms_ratio  : rms(out - ref8) / rms(ref8) (0 when ref8 is all zero and out is too)
    floor      : the floor this case is judged against
    err_floor  : max_abs / floor (inf when floor is 0 and max_abs is not)
    reasons    : why it failed, one short sentence each (empty when passed)
    seconds    : wall time of the kernel call and the checks
    detail     : free-form extras (worst element, non-finite count, ...)
    skipped    : the case lies outside what the implementation declares it supports (never a pass;
                 reasons says which factor)
    """

    suite: str
    case_id: str
    passed: bool
    max_abs: float
    rms_ratio: float
    floor: float
    err_floor: float
    reasons: tuple[str, ...] = ()
    seconds: float = 0.0
    detail: dict = field(default_factory=dict)
    skipped: bool = False

    def to_json(self) -> dict:
        data = asdict(self)
        data["reasons"] = list(self.reasons)
        return data

    @classmethod
    def from_json(cls, data: dict) -> "Verdict":
        data = dict(data)
        data["reasons"] = tuple(data.get("reasons", ()))
        return cls(**data)
