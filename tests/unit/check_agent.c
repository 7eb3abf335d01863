/*
 * check_agent - rx_agent: the EchoAgent, and the adapter to a graph node
 * (an Agent's whole state becomes a partial update that adds nothing twice).
 */
#include <check.h>
#include <errno.h>
#include <stdlib.h>

#include <jansson.h>

#include "graph/rx_agent.h"

START_TEST(echo_answers_the_user)
{
    json_t *in = json_pack("{s:[{s:s,s:s}],s:i}", "messages", "role", "user", "content",
                           "你好", "turn", 1);
    json_t *out = NULL, *last;

    ck_assert_str_eq(rx_agent_echo.name, "echo");
    ck_assert_int_eq(rx_agent_run(&rx_agent_echo, in, &out), 0);
    ck_assert_uint_eq(json_array_size(json_object_get(out, "messages")), 2);
    last = json_array_get(json_object_get(out, "messages"), 1);
    ck_assert_str_eq(json_string_value(json_object_get(last, "role")), "assistant");
    ck_assert_str_eq(json_string_value(json_object_get(last, "content")), "你好");
    ck_assert_int_eq(json_integer_value(json_object_get(out, "turn")), 1);
    ck_assert_uint_eq(json_array_size(json_object_get(in, "messages")), 1);
    json_decref(out);
    /* Nothing to answer after an assistant message. */
    json_t *again = NULL;
    ck_assert_int_eq(rx_agent_run(&rx_agent_echo, in, &out), 0);
    ck_assert_int_eq(rx_agent_run(&rx_agent_echo, out, &again), 0);
    ck_assert_uint_eq(json_array_size(json_object_get(again, "messages")), 2);
    json_decref(again);
    json_decref(out);
    ck_assert_int_eq(rx_agent_run(&rx_agent_echo, json_null(), &out), -EINVAL);
    json_decref(in);
}
END_TEST

static const struct rx_reducer schema[] = {
    {"messages", RX_REDUCER_ADD_MESSAGES, NULL, NULL},
};

START_TEST(agent_as_node)
{
    struct rx_graph *g = rx_graph_create(schema, 1);
    struct rx_graph_result res = {0};
    json_t *in = json_pack("{s:[{s:s,s:s,s:s}]}", "messages", "id", "u1", "role", "user",
                           "content", "hi");
    json_t *msgs;

    ck_assert_int_eq(rx_graph_add_node(g, "echo", rx_agent_node, (void *)&rx_agent_echo),
                     0);
    ck_assert_int_eq(rx_graph_add_edge(g, RX_GRAPH_START, "echo"), 0);
    ck_assert_int_eq(rx_graph_compile(g, NULL), 0);
    ck_assert_int_eq(rx_graph_invoke(g, in, NULL, &res, NULL), 0);
    msgs = json_object_get(res.state, "messages");
    ck_assert_uint_eq(json_array_size(msgs), 2);
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(msgs, 0), "id")),
                     "u1");
    ck_assert_str_eq(
        json_string_value(json_object_get(json_array_get(msgs, 1), "content")), "hi");
    ck_assert_ptr_nonnull(json_object_get(json_array_get(msgs, 1), "id"));
    rx_graph_result_release(&res);
    json_decref(in);
    rx_graph_destroy(g);
}
END_TEST

Suite *agent_suite(void);
Suite *agent_suite(void)
{
    Suite *s = suite_create("agent");
    TCase *tc = tcase_create("core");

    tcase_add_test(tc, echo_answers_the_user);
    tcase_add_test(tc, agent_as_node);
    suite_add_tcase(s, tc);
    return s;
}
