"""Tool-use seed (domain: inventory; variant: missing parameter): the warehouse and SKU must be looked up."""


class InventoryEnv(ToolUseBaseEnv):
    WAREHOUSES = ["north", "south", "east"]
    PRODUCTS = ["desk lamp", "office chair", "monitor arm", "standing desk", "keyboard tray"]

    def __init__(self, max_turns=25, **kwargs):
        super().__init__(max_turns=max_turns, **kwargs)

    def reset(self, seed=None):
        super().reset(seed)
        rng = self.rng
        catalog = {}
        for i, name in enumerate(self.PRODUCTS):
            catalog[f"SKU{100 + i}"] = {"name": name, "warehouse": rng.choice(self.WAREHOUSES), "stock": rng.randint(2, 20)}
        self._state = {"catalog": catalog, "orders": []}
        first, second = rng.sample(sorted(catalog), 2)
        add = rng.randint(5, 15)
        target = catalog[second]["stock"] + rng.randint(3, 9)
        priority, units = rng.choice(["low", "normal", "high"]), rng.randint(1, 4)
        self._plan = [
            ("find_product", {"name": catalog[first]["name"]}),
            ("restock", {"sku": first, "warehouse": catalog[first]["warehouse"], "quantity": add}),
            ("find_product", {"name": catalog[second]["name"]}),
            ("restock", {"sku": second, "warehouse": catalog[second]["warehouse"],
                         "quantity": target - catalog[second]["stock"]}),
            ("create_order", {"sku": first, "quantity": units, "priority": priority}),
        ]
        warehouse = {"type": "string", "enum": self.WAREHOUSES}
        self._tools = {
            "find_product": {"description": "Look a product up by name: its SKU, warehouse and stock.", "parameters": {
                "type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}},
            "restock": {"description": "Add units of a SKU to the warehouse that holds it.", "parameters": {
                "type": "object", "properties": {"sku": {"type": "string"}, "warehouse": warehouse,
                                                 "quantity": {"type": "integer"}},
                "required": ["sku", "warehouse", "quantity"]}},
            "create_order": {"description": "Order units of a SKU for a customer.", "parameters": {
                "type": "object", "properties": {"sku": {"type": "string"}, "quantity": {"type": "integer"},
                                                 "priority": {"type": "string", "enum": ["low", "normal", "high"]}},
                "required": ["sku", "quantity", "priority"]}},
            "get_shipping_quote": {"description": "A shipping quote for a parcel weight in kg.", "parameters": {
                "type": "object", "properties": {"weight_kg": {"type": "number"}}, "required": ["weight_kg"]}},
        }
        start_first, start_second = catalog[first]["stock"], catalog[second]["stock"]
        self._user_messages = [
            f"Restock the {catalog[first]['name']} with {add} more units.",
            f"Bring the {catalog[second]['name']} stock up to exactly {target} units.",
            f"Place a {priority}-priority order for {units} {catalog[first]['name']} units.",
        ]
        self._message_criteria = [
            lambda s: s["catalog"][first]["stock"] == start_first + add,
            lambda s: s["catalog"][second]["stock"] == target and start_second != target,
            lambda s: [first, units, priority] in s["orders"],
        ]
        self._current_msg, self._expected_answer = 0, "done"
        return self._user_messages[0], {}

    def tool_find_product(self, name):
        for sku, item in sorted(self._state["catalog"].items()):
            if item["name"] == str(name).strip().lower():
                return f"{sku}: {item['name']}, warehouse {item['warehouse']}, {item['stock']} in stock"
        return f"No product named {name!r}."

    def tool_restock(self, sku, warehouse, quantity):
        item = self._state["catalog"].get(sku)
        if item is None:
            return f"Error: unknown SKU {sku}"
        if str(warehouse).lower() != item["warehouse"]:
            return f"Error: {sku} is not stored in the {warehouse} warehouse"
        item["stock"] += int(quantity)
        return f"{sku} now has {item['stock']} units in {item['warehouse']}."

    def tool_create_order(self, sku, quantity, priority):
        if sku not in self._state["catalog"] or priority not in ("low", "normal", "high"):
            return "Error: unknown SKU or priority"
        self._state["orders"].append([sku, int(quantity), priority])
        return f"Order {len(self._state['orders'])} placed: {int(quantity)} x {sku} ({priority})."

    def tool_get_shipping_quote(self, weight_kg):
        return f"${4 + 2 * float(weight_kg):.2f}"

    def solution(self):
        return list(self._plan) + ["done"]
