// A GraphQL operation as the Mercurius adapter (./mercurius.ts) counts it: its root fields (aliases resolved to
// field names, fragments at the root followed), whether it is introspection, its requested cost walked over the
// document before execution and its actual cost walked over the result after it. One small walker over the
// selections, fragments and inline fragments with the schema, bounded for hostile documents: not
// graphql-query-complexity, whose estimators never read a result (so cannot give the actual cost) and which
// would be one more dependency.
import { getNamedType, isCompositeType, isListType, isNonNullType, Kind } from 'graphql'
import type {
  DocumentNode, FieldNode, FragmentDefinitionNode, InlineFragmentNode, GraphQLCompositeType, GraphQLField, GraphQLOutputType, GraphQLSchema,
  OperationDefinitionNode, SelectionSetNode, ValueNode
} from 'graphql'

/** How fields are priced (the adapter's `cost` option, checked). */
export interface CostRule {
  /** 'Type.field' → its cost per value returned. */
  readonly fields: ReadonlyMap<string, number>
  /** Arguments whose value is a list's size ('first', 'last', 'limit'). */
  readonly listArguments: readonly string[]
  /** A list's size without such an argument. */
  readonly defaultListSize: number
}

/** The deepest selection the walker follows, and the most selections it visits: past either, the cost is Infinity. */
export const MAX_DEPTH = 64
export const MAX_VISITS = 20_000

/** Root fields that only introspect (`{ __typename }` counts as introspection). */
const INTROSPECTION = new Set(['__schema', '__type', '__typename'])

type Variables = Readonly<Record<string, unknown>> | undefined | null

/** The document's fragments by name. */
export function fragmentsOf (document: DocumentNode): Map<string, FragmentDefinitionNode> {
  const found = new Map<string, FragmentDefinitionNode>()
  for (const definition of document.definitions) {
    if (definition.kind === Kind.FRAGMENT_DEFINITION) found.set(definition.name.value, definition)
  }
  return found
}

/** Whether `@skip` / `@include` leave a selection in (literal or variable conditions). */
function included (node: { directives?: readonly { name: { value: string }, arguments?: readonly any[] }[] }, variables: Variables): boolean {
  for (const directive of node.directives ?? []) {
    const name = directive.name.value
    if (name !== 'skip' && name !== 'include') continue
    const condition = directive.arguments?.find(a => a.name.value === 'if')?.value as ValueNode | undefined
    const value = condition === undefined ? undefined : valueOf(condition, variables)
    if (value === (name === 'skip')) return false
  }
  return true
}

/** A literal's value, or a variable's (lists and objects: undefined, which no rule here reads). */
function valueOf (node: ValueNode, variables: Variables): unknown {
  switch (node.kind) {
    case Kind.VARIABLE: return variables?.[node.name.value]
    case Kind.INT: return Number(node.value)
    case Kind.BOOLEAN: return node.value
    default: return undefined
  }
}

/** A field met in a selection, with the type it was selected on; false stops the walk. */
type Visit = (field: FieldNode, parent: GraphQLCompositeType | undefined) => boolean

/** What one walk reads: the schema, the document's fragments, the variables, and what is left of its bound. */
interface Walk {
  readonly schema: GraphQLSchema
  readonly fragments: Map<string, FragmentDefinitionNode>
  readonly variables: Variables
  visits: number
}

function walkOf (schema: GraphQLSchema, document: DocumentNode, variables: Variables, visits: number): Walk {
  return { schema, fragments: fragmentsOf(document), variables, visits }
}

/**
 * Calls `visit` on each field of a selection set, following fragments and inline fragments (a fragment name
 * once per selection set: a cycle, or a fragment spread twice, is followed once; nested at most MAX_DEPTH).
 * Answers false when stopped, or past the walk's bounds.
 */
function eachField (
  walk: Walk, parent: GraphQLCompositeType | undefined, set: SelectionSetNode, visit: Visit, seen = new Set<string>(), nesting = 0
): boolean {
  if (nesting > MAX_DEPTH) return false
  for (const selection of set.selections) {
    if (--walk.visits < 0) return false
    if (!included(selection, walk.variables)) continue
    if (selection.kind === Kind.FIELD) {
      if (!visit(selection, parent)) return false
      continue
    }
    let fragment: FragmentDefinitionNode | InlineFragmentNode | undefined = selection as InlineFragmentNode
    if (selection.kind === Kind.FRAGMENT_SPREAD) {
      const name = selection.name.value
      if (seen.has(name)) continue
      seen.add(name)
      fragment = walk.fragments.get(name)
      if (fragment === undefined) continue
    }
    const condition = fragment.typeCondition
    const on = condition === undefined ? parent : walk.schema.getType(condition.name.value) as GraphQLCompositeType | undefined
    if (!eachField(walk, on, fragment.selectionSet, visit, seen, nesting + 1)) return false
  }
  return true
}

/** An operation's root fields by field name, each occurrence counted (`a: signIn b: signIn`: signIn twice). */
export function rootFieldsOf (
  schema: GraphQLSchema, document: DocumentNode, operation: OperationDefinitionNode, variables: Variables
): { fields: Map<string, number>, introspection: boolean } {
  const fields = new Map<string, number>()
  const visit: Visit = field => {
    const name = field.name.value
    fields.set(name, (fields.get(name) ?? 0) + 1)
    return true
  }
  eachField(walkOf(schema, document, variables, MAX_VISITS), undefined, operation.selectionSet, visit)
  let introspection = fields.size > 0
  for (const name of fields.keys()) if (!INTROSPECTION.has(name)) introspection = false
  return { fields, introspection }
}

/** A field's definition on the type it was selected on (none for `__typename` and the like, or an unknown type). */
function definitionOf (parent: GraphQLCompositeType | undefined, field: FieldNode): GraphQLField<unknown, unknown> | undefined {
  if (parent === undefined || !('getFields' in parent)) return undefined
  return parent.getFields()[field.name.value]
}

/** A field's cost per value: its own in the rule, else 1 for an object, interface or union (a list of them too), 0 for the rest. */
function ownCost (rule: CostRule, parent: GraphQLCompositeType, definition: GraphQLField<unknown, unknown>): number {
  return rule.fields.get(`${parent.name}.${definition.name}`) ?? (isCompositeType(getNamedType(definition.type)) ? 1 : 0)
}

/** Whether a field's type is a list (non-null or not). */
function isList (type: GraphQLOutputType): boolean {
  return isListType(isNonNullType(type) ? type.ofType : type)
}

/** A list field's size as asked: its first list argument given (a non-negative whole number), else the default. */
function sizeOf (rule: CostRule, field: FieldNode, variables: Variables): number {
  for (const name of rule.listArguments) {
    const argument = field.arguments?.find(a => a.name.value === name)
    if (argument === undefined) continue
    const value = valueOf(argument.value, variables)
    if (typeof value === 'number' && Number.isSafeInteger(value) && value >= 0) return value
  }
  return rule.defaultListSize
}

/**
 * The operation's requested cost: each field costs its size (a list's asked size; 1 for a field that is no
 * list) times its own cost plus its selection's. Infinity for a document past the walker's bounds.
 */
export function requestedCost (
  schema: GraphQLSchema, document: DocumentNode, operation: OperationDefinitionNode, variables: Variables, rule: CostRule
): number {
  const walk = walkOf(schema, document, variables, MAX_VISITS)
  const root = schema.getRootType(operation.operation) ?? undefined
  const costOf = (parent: GraphQLCompositeType | undefined, set: SelectionSetNode, depth: number): number => {
    if (depth > MAX_DEPTH) return Infinity
    let total = 0
    const visit: Visit = (field, on) => {
      const definition = definitionOf(on, field)
      if (definition === undefined) return true
      const type = getNamedType(definition.type) as GraphQLCompositeType
      const below = field.selectionSet === undefined ? 0 : costOf(type, field.selectionSet, depth + 1)
      const size = isList(definition.type) ? sizeOf(rule, field, variables) : 1
      total += size * (ownCost(rule, on!, definition) + below)
      return total !== Infinity
    }
    return eachField(walk, parent, set, visit) ? total : Infinity
  }
  return costOf(root, operation.selectionSet, 0)
}

/**
 * The operation's actual cost, walked over the result's data: each value returned costs its field's own cost
 * (a list's each element), plus its selection's; a null costs nothing. Bounded as the requested walk is (a
 * result past the bounds costs Infinity, which the adapter reads as the requested cost).
 */
export function actualCost (
  schema: GraphQLSchema, document: DocumentNode, operation: OperationDefinitionNode, variables: Variables, rule: CostRule,
  data: unknown
): number {
  const walk = walkOf(schema, document, variables, MAX_VISITS * 10)
  const root = schema.getRootType(operation.operation) ?? undefined
  const costOf = (parent: GraphQLCompositeType | undefined, set: SelectionSetNode, value: unknown, depth: number): number => {
    if (depth > MAX_DEPTH) return Infinity
    if (typeof value !== 'object' || value === null) return 0
    let total = 0
    const visit: Visit = (field, on) => {
      const definition = definitionOf(on, field)
      const returned = (value as Record<string, unknown>)[field.alias?.value ?? field.name.value]
      if (definition === undefined || returned === undefined || returned === null) return true
      const own = ownCost(rule, on!, definition)
      const type = getNamedType(definition.type) as GraphQLCompositeType
      const each = (one: unknown): number => one === null
        ? 0
        : own + (field.selectionSet === undefined ? 0 : costOf(type, field.selectionSet, one, depth + 1))
      if (Array.isArray(returned)) {
        for (const one of returned) if (--walk.visits >= 0) total += each(one)
      } else total += each(returned)
      return total !== Infinity && walk.visits >= 0
    }
    return eachField(walk, parent, set, visit) ? total : Infinity
  }
  return costOf(root, operation.selectionSet, data, 0)
}
