"""Tool-use seed (domain: banking; variant: read-then-write): read a balance, move half of it, pay a bill."""


class BankingEnv(ToolUseBaseEnv):
    ACCOUNTS = ["checking", "savings", "travel"]

    def __init__(self, max_turns=25, **kwargs):
        super().__init__(max_turns=max_turns, **kwargs)

    def reset(self, seed=None):
        super().reset(seed)
        rng = self.rng
        balances = {a: 2 * rng.randint(100, 900) for a in self.ACCOUNTS}
        self._state = {"balances": dict(balances), "viewed": [], "bills": []}
        source = rng.choice(["checking", "travel"])
        half = balances[source] // 2
        payee, amount = rng.choice(["power company", "water utility", "internet provider"]), rng.randint(20, 90)
        self._plan = [("get_balance", {"account": source}),
                      ("transfer", {"from_account": source, "to_account": "savings", "amount": half}),
                      ("pay_bill", {"payee": payee, "amount": amount, "account": "savings"})]
        account = {"type": "string", "enum": self.ACCOUNTS}
        self._tools = {
            "get_balance": {"description": "The balance of one account, in dollars.", "parameters": {
                "type": "object", "properties": {"account": account}, "required": ["account"]}},
            "transfer": {"description": "Move whole dollars between two accounts.", "parameters": {
                "type": "object", "properties": {"from_account": account, "to_account": account,
                                                 "amount": {"type": "integer"}},
                "required": ["from_account", "to_account", "amount"]}},
            "pay_bill": {"description": "Pay a bill from an account.", "parameters": {
                "type": "object", "properties": {"payee": {"type": "string"}, "amount": {"type": "integer"},
                                                 "account": account}, "required": ["payee", "amount", "account"]}},
            "get_exchange_rate": {"description": "The exchange rate of a currency to dollars.", "parameters": {
                "type": "object", "properties": {"currency": {"type": "string"}}, "required": ["currency"]}},
        }
        self._user_messages = [
            f"What is the balance of my {source} account?",
            f"Move exactly half of the {source} balance into savings.",
            f"Now pay the {payee} bill of ${amount} from savings.",
        ]
        target = balances["savings"] + half
        self._message_criteria = [
            lambda s: source in s["viewed"],
            lambda s: s["balances"]["savings"] >= target and s["balances"][source] == balances[source] - half,
            lambda s: [payee, amount, "savings"] in s["bills"],
        ]
        self._current_msg, self._expected_answer = 0, "done"
        return self._user_messages[0], {}

    def _account(self, name):
        name = str(name).strip().lower()
        if name not in self.ACCOUNTS:
            raise ValueError(f"account must be one of {self.ACCOUNTS}")
        return name

    def tool_get_balance(self, account):
        account = self._account(account)
        if account not in self._state["viewed"]:
            self._state["viewed"].append(account)
        return f"{account}: ${self._state['balances'][account]}"

    def tool_transfer(self, from_account, to_account, amount):
        source, target, amount = self._account(from_account), self._account(to_account), int(amount)
        if amount <= 0 or amount > self._state["balances"][source]:
            return f"Error: cannot move ${amount} from {source}"
        self._state["balances"][source] -= amount
        self._state["balances"][target] += amount
        return f"Moved ${amount} from {source} to {target}."

    def tool_pay_bill(self, payee, amount, account):
        account, amount = self._account(account), int(amount)
        if amount > self._state["balances"][account]:
            return "Error: insufficient funds"
        self._state["balances"][account] -= amount
        self._state["bills"].append([str(payee).strip().lower(), amount, account])
        return f"Paid ${amount} to {payee} from {account}."

    def tool_get_exchange_rate(self, currency):
        return f"1 {currency} = 1.08 USD"

    def solution(self):
        return list(self._plan) + ["done"]
